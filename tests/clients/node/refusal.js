// node-zookeeper-client meets a Baton refusal (tests/e2e/tests/refusals.rs).
//
// node refusal.js HOST:PORT: with a shared quota of 5,000 bytes, the first 3,000-byte create
// passes, the second is refused; then reads, a small create and deletes must work on the same
// session, with no disconnection seen. Prints each step; exits 0 only if all of it held.
'use strict';

const zookeeper = require('node-zookeeper-client');

const BASE = '/refusals';
const BIG = Buffer.alloc(3000, 'x');
// Each call waits at most this long: a client whose connection died fails, not hangs.
const CALL_MS = 15000;

// Runs client.METHOD(...args, callback) as a promise that fails after CALL_MS.
function call(what, client, method, ...args) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CALL_MS} ms`)), CALL_MS);
    client[method](...args, (error, ...results) => {
      clearTimeout(timer);
      if (error) {
        reject(error);
      } else {
        resolve(results);
      }
    });
  });
}

async function main() {
  if (process.argv.length !== 3) {
    throw new Error('usage: node refusal.js HOST:PORT');
  }
  const client = zookeeper.createClient(process.argv[2], { sessionTimeout: 20000 });
  const connected = new Promise((resolve) => client.once('connected', resolve));
  client.connect();
  await connected;
  const states = []; // every state after the first connection: none if the connection held
  client.on('state', (state) => states.push(String(state)));
  const session = client.getSessionId().toString('hex');
  console.log(`session 0x${session}`);

  try {
    await call('create base', client, 'create', BASE);
  } catch (error) {
    if (error.getCode?.() !== zookeeper.Exception.NODE_EXISTS) {
      throw error;
    }
  }
  await call('create big-1', client, 'create', `${BASE}/big-1`, BIG);
  console.log('created big-1');
  let refusal;
  try {
    await call('create big-2', client, 'create', `${BASE}/big-2`, BIG);
  } catch (error) {
    refusal = error;
  }
  if (!refusal) {
    throw new Error('big-2 was not refused');
  }
  if (!refusal.getCode) {
    throw refusal; // no answer at all, rather than a refusal
  }
  console.log(`refused big-2: ${refusal.name}: ${refusal.message} (code ${refusal.getCode()})`);

  const [stat] = await call('exists big-1', client, 'exists', `${BASE}/big-1`);
  if (!stat) {
    throw new Error('big-1 is gone');
  }
  const [data] = await call('get big-1', client, 'getData', `${BASE}/big-1`);
  if (!BIG.equals(data)) {
    throw new Error(`big-1 holds ${data.length} bytes`);
  }
  console.log('read big-1');
  await call('create small', client, 'create', `${BASE}/small`, Buffer.from('s'));
  await call('delete small', client, 'remove', `${BASE}/small`, -1);
  console.log('created and deleted small');
  await call('delete big-1', client, 'remove', `${BASE}/big-1`, -1);
  await call('create big-2 after the delete', client, 'create', `${BASE}/big-2`, BIG);
  console.log('big-2 created once big-1 was deleted');

  const now = client.getSessionId().toString('hex');
  if (now !== session) {
    throw new Error(`session changed from 0x${session} to 0x${now}`);
  }
  if (states.length) {
    throw new Error(`states seen after connecting: ${states.join(', ')}`);
  }
  console.log(`same session 0x${session}, no disconnection`);
  client.close();
  console.log('ok');
}

main().catch((error) => {
  console.error(`FAILED: ${error.stack || error}`);
  process.exit(1);
});
