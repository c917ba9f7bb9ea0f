/*
 * The test node's sandbox ("pause") container: the first process of every pod, holding the pod's
 * namespaces while its containers come and go. It sleeps until a signal: SIGINT or SIGTERM end
 * it, SIGCHLD has it reap whatever exited (it is the pod's init when the pod shares its process
 * namespace). Built static, so its image needs no other file.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

static void on(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, NULL) != 0) {
    perror("pause: sigaction");
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    puts("baton test pause");
    return 0;
  }
  if (getpid() != 1) {
    fputs("pause: not running as the first process of its namespace\n", stderr);
  }
  on(SIGINT, stop);
  on(SIGTERM, stop);
  on(SIGCHLD, reap);
  for (;;) {
    pause();
  }
}
