'use strict';
// redis-semaphore 5.8 Mutex (argv "mutex": node 0 only) or RedlockMutex (argv "redlock": every node,
// quorum round((N+1)/2)), a new instance per acquire as the README does, with the README's
// defaults except lockTimeout = the trial's TTL and acquireAttemptsLimit: 1 (one attempt; the
// harness retries). Automatic refresh every 0.8 × lockTimeout (an owner-checked PEXPIRE); the
// default onLockLost throws an unhandled LostLockError and Node EXITS with code 1: this client
// keeps that default, so the harness sees the exit (recorded as client-exit, the held lease lost)
// and starts a new client at the next acquire, as a process supervisor would. The library keeps no
// validity of its own: the deadline reported is the acquire's (or last refresh's) start + TTL.
// release() returns nothing: whether it deleted our key is read from the library's own delete
// script's results (observed, not changed): Mutex, the key on node 0; RedlockMutex, on a quorum.
const { Mutex, RedlockMutex } = require('redis-semaphore');
const deletes = require('redis-semaphore/lib/mutex/release');
const { serve, connect, disconnect, after, report, mono, Grants } = require('./protocol');

const kind = process.argv[2];
if (kind !== 'mutex' && kind !== 'redlock') {
  process.stderr.write('usage: node semaphore.js mutex|redlock\n');
  process.exit(2);
}
let clients = [];
const grants = new Grants();
const held = new Map(); // owner -> { mutex, validUntil }
const deleted = new Map(); // owner being released -> how many nodes deleted its key

// Both Mutex and RedlockMutex release through this module's delIfEqualLua(client, [key, identifier]).
const delIfEqual = deletes.delIfEqualLua;
deletes.delIfEqualLua = (client, args) =>
  delIfEqual(client, args).then((result) => {
    const owner = String(args[1]);
    if (deleted.has(owner) && Number(result) === 1) deleted.set(owner, deleted.get(owner) + 1);
    return result;
  });

function observeGrants(client, index) {
  const set = client.set.bind(client);
  client.set = (...args) =>
    set(...args).then((result) => {
      if (result === 'OK') grants.add(String(args[1]), index); // set(key, identifier, 'PX', ttl, 'NX')
      return result;
    });
}

serve({
  library: 'redis-semaphore',
  version: require('redis-semaphore/package.json').version,
  async start({ nodes }) {
    clients = await connect(kind === 'mutex' ? nodes.slice(0, 1) : nodes);
    clients.forEach(observeGrants);
  },
  async acquire({ key, ttlMs }) {
    const options = { lockTimeout: ttlMs, acquireAttemptsLimit: 1 };
    const mutex = kind === 'mutex' ? new Mutex(clients[0], key, options) : new RedlockMutex(clients, key, options);
    const owner = mutex.identifier;
    const entry = { mutex, validUntil: null };
    // Record each automatic refresh (observation only: its result goes back to the library).
    const refresh = mutex._refresh.bind(mutex);
    mutex._refresh = async () => {
      const t0 = mono();
      try {
        const refreshed = await refresh();
        if (refreshed) entry.validUntil = after(t0, ttlMs);
        report({ t0, t1: mono(), ok: refreshed, owner, valid_until: refreshed ? entry.validUntil : null, reason: refreshed ? null : 'lost' });
        return refreshed;
      } catch (err) {
        report({ t0, t1: mono(), ok: false, owner, reason: 'error', error: String(err.message || err) });
        throw err;
      }
    };
    const t0 = mono();
    const acquired = await mutex.tryAcquire();
    if (!acquired) {
      grants.take(owner);
      return { ok: false, reason: 'held' };
    }
    entry.validUntil = after(t0, ttlMs);
    held.set(owner, entry);
    return { ok: true, owner, valid_until: entry.validUntil, granted_by: grants.take(owner) };
  },
  async release({ owner }) {
    const entry = held.get(owner);
    held.delete(owner);
    if (!entry) return { ok: true, released: false };
    deleted.set(owner, 0);
    let count = 0;
    try {
      await entry.mutex.release();
    } finally {
      count = deleted.get(owner);
      deleted.delete(owner);
    }
    const quorum = kind === 'mutex' ? 1 : Math.round((clients.length + 1) / 2);
    return { ok: true, released: count >= quorum };
  },
  async check({ owner }) {
    const entry = held.get(owner);
    if (!entry || !entry.mutex.isAcquired) return { ok: true, valid: false, reason: 'lost' };
    return { ok: true, valid: true, valid_until: entry.validUntil };
  },
  async extend() {
    return { ok: false, reason: 'unsupported', error: 'redis-semaphore refreshes by itself' };
  },
  async close() {
    for (const entry of held.values()) entry.mutex.stopRefresh();
    disconnect(clients);
  },
});
