/*
 * The ZooKeeper C client (Debian's libzookeeper-mt) meets a Baton refusal
 * (tests/e2e/tests/refusals.rs).
 *
 * refusal HOST:PORT: with a shared quota of 5,000 bytes, the first 3,000-byte create passes,
 * the second is refused; then reads, a small create and deletes must work on the same session,
 * with no disconnection seen. Prints each step; exits 0 only if all of it held.
 */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* The synchronous calls exist in the multi-threaded library only. */
#define THREADED
#include <zookeeper/zookeeper.h>

#define BASE "/refusals"
#define BIG_BYTES 3000
/* Each call may take at most this long: SIGALRM ends a client whose connection died. */
#define CALL_SECONDS 15

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int connected;
static int states_after; /* session events after the first connection */
static int last_state;

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *context) {
    (void)zh;
    (void)path;
    (void)context;
    if (type != ZOO_SESSION_EVENT) {
        return;
    }
    pthread_mutex_lock(&lock);
    if (connected) {
        states_after++;
        last_state = state;
    } else if (state == ZOO_CONNECTED_STATE) {
        connected = 1;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
}

static void fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    fputs("FAILED: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(1);
}

/* Names the step about to run (so a hang shows where) and arms its deadline. */
static void step(const char *what) {
    printf("step: %s\n", what);
    fflush(stdout);
    alarm(CALL_SECONDS);
}

static void ok(int rc, const char *what) {
    alarm(0);
    if (rc != ZOK) {
        fail("%s: %d (%s)", what, rc, zerror(rc));
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fail("usage: %s HOST:PORT", argv[0]);
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    step("connect");
    zhandle_t *zh = zookeeper_init(argv[1], watcher, 20000, NULL, NULL, 0);
    if (zh == NULL) {
        fail("zookeeper_init");
    }
    pthread_mutex_lock(&lock);
    while (!connected) {
        pthread_cond_wait(&changed, &lock);
    }
    pthread_mutex_unlock(&lock);
    alarm(0);
    int64_t session = zoo_client_id(zh)->client_id;
    printf("session 0x%llx\n", (long long)session);

    char big[BIG_BYTES];
    memset(big, 'x', sizeof big);
    step("create base");
    int rc = zoo_create(zh, BASE, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
    ok(rc == ZNODEEXISTS ? ZOK : rc, "create base");
    step("create big-1");
    ok(zoo_create(zh, BASE "/big-1", big, sizeof big, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0),
       "create big-1");
    step("create big-2");
    rc = zoo_create(zh, BASE "/big-2", big, sizeof big, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
    alarm(0);
    if (rc == ZOK) {
        fail("big-2 was not refused");
    }
    printf("refused big-2: rc %d (%s)%s\n", rc, zerror(rc), rc == ZBADARGUMENTS ? " ZBADARGUMENTS" : "");

    struct Stat stat;
    step("exists big-1");
    ok(zoo_exists(zh, BASE "/big-1", 0, &stat), "exists big-1");
    char read[BIG_BYTES + 1];
    int len = sizeof read;
    step("get big-1");
    ok(zoo_get(zh, BASE "/big-1", 0, read, &len, &stat), "get big-1");
    if (len != BIG_BYTES || memcmp(read, big, BIG_BYTES) != 0) {
        fail("big-1 holds %d bytes", len);
    }
    step("create small");
    ok(zoo_create(zh, BASE "/small", "s", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0), "create small");
    step("delete small");
    ok(zoo_delete(zh, BASE "/small", -1), "delete small");
    step("delete big-1");
    ok(zoo_delete(zh, BASE "/big-1", -1), "delete big-1");
    step("create big-2 after the delete");
    ok(zoo_create(zh, BASE "/big-2", big, sizeof big, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0),
       "create big-2 after the delete");

    int64_t now = zoo_client_id(zh)->client_id;
    if (now != session) {
        fail("session changed from 0x%llx to 0x%llx", (long long)session, (long long)now);
    }
    pthread_mutex_lock(&lock);
    int after = states_after, state = last_state;
    pthread_mutex_unlock(&lock);
    if (after != 0) {
        fail("%d session events after connecting, the last in state %d", after, state);
    }
    printf("same session 0x%llx, no disconnection\n", (long long)session);
    zookeeper_close(zh);
    puts("ok");
    return 0;
}
