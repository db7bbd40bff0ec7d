// The etcd store's own logic with its client (etcd's v3 JSON gateway over HTTP), without an etcd:
// the stand-in gateway (test/support/etcd-gateway.ts) answers as etcd does, or a TCP server that
// never answers stands in for a partition. Real etcd is in the integration tests.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Socket, createServer } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EtcdStore } from '../../../../src/flannel/store/etcd-store';
import { StoreUnavailable } from '../../../../src/flannel/manager';
import { encodeAttrs } from '../../../../src/flannel/lease';
import { IP, Prefix } from '../../../../src/net/ip';
import { FakeEtcdGateway } from '../../../support/etcd-gateway';

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));
const K = (s: string) => `/coreos.com/network/subnets/${s}`;
const value = (n: number) => encodeAttrs({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
const ips = async (store: EtcdStore) => (await store.list()).leases.map((l) => `${l.subnet} ${l.attrs.publicIP}`).sort();

let gw: FakeEtcdGateway;
let url: string;
const stores: EtcdStore[] = [];
const open = async (extra: Record<string, unknown> = {}) => {
  const s = await EtcdStore.open({ etcdEndpoints: [url], ...extra });
  stores.push(s);
  return s;
};
beforeEach(async () => {
  gw = new FakeEtcdGateway();
  url = await gw.start();
});
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  await gw.stop();
  vi.useRealTimers();
});

describe('etcd store: create', () => {
  const attrs = { publicIP: IP.parse('192.168.88.1')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:01' };
  const P = (t: string) => Prefix.parse(t)!;

  it('with the list the subnets were chosen from, reads no range again and guards the write by that list\'s revision', async () => {
    const store = await open();
    gw.put(K('10.88.1.0-24'), encodeAttrs({ ...attrs, publicIP: IP.parse('192.168.88.2')! }), '7'); // revision 42
    const listed = await store.list();
    expect(gw.ranges).toBe(1);
    gw.put('/elsewhere', 'x'); // written since (43): the write must still be guarded by the list's revision, 42
    expect(await store.create({ subnet: P('10.88.1.0/25') }, attrs, 60, listed)).toBe(false); // overlaps a listed lease
    expect(await store.create({ subnet: P('10.88.2.0/24') }, attrs, 60, listed)).toBe(true);
    expect(gw.ranges).toBe(1);
    expect(gw.txns.at(-1)!.compare[1]).toMatchObject({ target: 'MOD', result: 'LESS', mod_revision: '43' });
    // without it, create lists first (and is guarded by that list's revision)
    expect(await store.create({ subnet: P('10.88.3.0/24') }, attrs, 60)).toBe(true);
    expect(gw.ranges).toBe(2);
    expect(gw.txns.at(-1)!.compare[1].mod_revision).toBe('45'); // listed at 44, after the first create's write
    // a key written meanwhile under subnets/ fails the guard
    const stale = await store.list();
    gw.put(K('10.88.9.0-24'), value(9));
    expect(await store.create({ subnet: P('10.88.4.0/24') }, attrs, 60, stale)).toBe(false);
    expect(gw.revoked).toHaveLength(1); // the etcd lease granted for it is given back
  });
});

describe('etcd store: lists answered from the watch', () => {
  /** A store with one lease, listed (a range read), and a watch from that list. */
  const watched = async () => {
    const store = await open();
    gw.put(K('10.88.1.0-24'), value(1), '7');
    const { revision } = await store.list();
    const changes: string[] = [];
    const stop = store.watch((why) => changes.push(why), () => {}, revision);
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1));
    return { store, changes, stop };
  };

  it('while the watch runs, a list after a change is made from the watch\'s events: no range read of every lease', async () => {
    const { store, changes, stop } = await watched();
    expect(gw.ranges).toBe(1);
    gw.put(K('10.88.2.0-24'), value(2), '7');
    gw.put(K('10.88.1.0-24'), value(9), '7'); // lease 1 changes hands
    await vi.waitFor(() => expect(changes).toHaveLength(2));
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.9', '10.88.2.0/24 192.168.88.2']);
    gw.delete(K('10.88.2.0-24'));
    await vi.waitFor(() => expect(changes).toHaveLength(3));
    const list = await store.list();
    expect(list.leases.map((l) => l.subnet?.toString())).toEqual(['10.88.1.0/24']);
    expect(list.revision).toBe(String(gw.revision));
    expect(gw.ranges).toBe(1);
    expect(changes).toEqual([`etcd put "${K('10.88.2.0-24')}"`, `etcd put "${K('10.88.1.0-24')}"`, `etcd delete "${K('10.88.2.0-24')}"`]);
    stop();
    await store.list(); // no watch: a range read
    expect(gw.ranges).toBe(2);
  });

  it('our own write: lists read the range until the watch brings the write back', async () => {
    const { store, changes, stop } = await watched();
    expect(await store.create({ subnet: Prefix.parse('10.88.5.0/24')! }, { publicIP: IP.parse('192.168.88.5')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:05' }, 60)).toBe(true);
    await vi.waitFor(() => expect(changes).toHaveLength(1)); // the watch delivers our write
    const reads = gw.ranges;
    expect((await ips(store)).some((l) => l.startsWith('10.88.5.0/24'))).toBe(true);
    expect(gw.ranges).toBe(reads);
    stop();
  });

  it('a watch that broke: lists read the range until it is attached again (from the revision after the last it saw), then from memory', async () => {
    const { store, changes, stop } = await watched();
    gw.put(K('10.88.2.0-24'), value(2));
    await vi.waitFor(() => expect(changes).toHaveLength(1));
    const seen = gw.revision;
    gw.refuseWatches = true;
    gw.dropWatches();
    await tick(50);
    await store.list();
    await store.list(); // etcd answers, but the watch is not attached again yet: still read
    expect(gw.ranges).toBe(3);
    gw.put(K('10.88.3.0-24'), value(3)); // while it was down
    gw.refuseWatches = false;
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1), { timeout: 5000 });
    expect(gw.watches[0].startRevision).toBe(String(seen + 1)); // what it missed is replayed
    await vi.waitFor(() => expect(changes.at(-1)).toBe('etcd watch (re)connected'));
    expect(changes).toContain(`etcd put "${K('10.88.3.0-24')}"`);
    await store.list();
    expect(gw.ranges).toBe(4);
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.1', '10.88.2.0/24 192.168.88.2', '10.88.3.0/24 192.168.88.3']);
    expect(gw.ranges).toBe(4);
    stop();
  });

  it('events that come while a range read is in flight are applied over its result', async () => {
    const { store, changes, stop } = await watched();
    gw.put('/elsewhere', 'x'); // the store wrote nothing, but the next list must read: it has seen no event since
    let release!: () => void;
    gw.holdRead = new Promise((r) => (release = r));
    gw.dropWatches(); // the next list reads the range
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1), { timeout: 5000 });
    const reading = store.list();
    await vi.waitFor(() => expect(gw.ranges).toBe(2));
    gw.put(K('10.88.2.0-24'), value(2)); // after the read's state, before its answer
    await vi.waitFor(() => expect(changes).toContain(`etcd put "${K('10.88.2.0-24')}"`));
    gw.holdRead = undefined;
    release();
    await reading;
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.1', '10.88.2.0/24 192.168.88.2']);
    stop();
  });

  it('the range is read at least every 10 s, whatever the watch says', async () => {
    const { store, stop } = await watched();
    vi.useFakeTimers({ toFake: ['Date'] });
    await store.list();
    expect(gw.ranges).toBe(1);
    vi.advanceTimersByTime(10_000);
    await store.list();
    expect(gw.ranges).toBe(2);
    stop();
  });
});

describe('etcd store: changes since the last list', () => {
  const watched = async () => {
    const store = await open();
    gw.put(K('10.88.1.0-24'), value(1), '7');
    gw.put(K('10.88.3.0-24'), value(3), '7');
    const listed = await store.list();
    const changes: string[] = [];
    const stop = store.watch((why) => changes.push(why), () => {}, listed.revision);
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1));
    return { store, listed, changes, stop };
  };
  const named = (leases: { subnet?: unknown; attrs: { publicIP?: unknown } }[]) => leases.map((l) => `${l.subnet} ${l.attrs.publicIP}`).sort();

  it('are told from the watch\'s events, by identity, without a range read; each delta counts from the one before', async () => {
    const { store, listed, changes, stop } = await watched();
    const one = listed.leases.find((l) => l.subnet!.toString() === '10.88.1.0/24')!;
    const three = listed.leases.find((l) => l.subnet!.toString() === '10.88.3.0/24')!;
    gw.put(K('10.88.2.0-24'), value(2), '7'); // new
    gw.put(K('10.88.1.0-24'), value(9), '7'); // changed
    gw.delete(K('10.88.3.0-24')); // gone
    gw.put(K('10.88.4.0-24'), value(4), '7');
    gw.delete(K('10.88.4.0-24')); // came and went between two deltas: neither
    gw.put(K('not-a-subnet'), value(5), '7'); // unreadable
    await vi.waitFor(() => expect(changes).toHaveLength(6));
    const d = (await store.changes(listed.revision!))!;
    expect(d.removed).toHaveLength(2);
    expect(d.removed).toContain(one);
    expect(d.removed).toContain(three);
    expect(named(d.added)).toEqual(['10.88.1.0/24 192.168.88.9', '10.88.2.0/24 192.168.88.2']);
    expect(d.bad.map((b) => b.key)).toEqual(['not-a-subnet']);
    expect(d.revision).toBe(String(gw.revision));
    expect(gw.ranges).toBe(1);
    // nothing since: nothing; an older revision than the last handed out: cannot tell
    expect(await store.changes(d.revision)).toEqual({ removed: [], added: [], bad: [], revision: d.revision });
    expect(await store.changes(listed.revision!)).toBeUndefined();
    // a list hands out a new picture: deltas count from it
    gw.put(K('10.88.2.0-24'), value(8), '7');
    await vi.waitFor(() => expect(changes).toHaveLength(7));
    const relisted = await store.list();
    expect(await store.changes(d.revision)).toBeUndefined();
    expect(await store.changes(relisted.revision!)).toEqual({ removed: [], added: [], bad: [], revision: relisted.revision });
    stop();
  });

  it('while the watch is down, a range read first, which tells what changed meanwhile', async () => {
    gw.put(K('10.88.6.0-24'), value(6), '7');
    const { store, listed, stop } = await watched();
    const [one, three] = ['10.88.1.0/24', '10.88.3.0/24'].map((n) => listed.leases.find((l) => l.subnet!.toString() === n)!);
    gw.refuseWatches = true;
    gw.dropWatches();
    await tick(50);
    gw.put(K('10.88.1.0-24'), value(7), '7'); // unseen by any watch
    gw.put(K('10.88.5.0-24'), value(5), '7');
    gw.delete(K('10.88.3.0-24'));
    const d = (await store.changes(listed.revision!))!;
    expect(gw.ranges).toBe(2);
    expect(d.removed).toHaveLength(2);
    expect(d.removed).toEqual(expect.arrayContaining([one, three]));
    // the lease the read found unchanged stays the same object: neither removed nor added
    expect(named(d.added)).toEqual(['10.88.1.0/24 192.168.88.7', '10.88.5.0/24 192.168.88.5']);
    stop();
  });
});

describe('etcd store: watch', () => {
  it('starts at the revision after the caller\'s list, so a change between the list and the watch is replayed', async () => {
    const store = await open();
    const stop = store.watch(() => {}, () => {}, '41');
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1));
    expect(gw.watches.map(({ key, rangeEnd, startRevision }) => ({ key, rangeEnd, startRevision }))).toEqual([
      { key: '/coreos.com/network/subnets/', rangeEnd: '/coreos.com/network/subnets0', startRevision: '42' },
    ]);
    stop();
    await vi.waitFor(() => expect(gw.watches).toHaveLength(0)); // cancelled: its stream closed
    const stop2 = store.watch(() => {}, () => {});
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1));
    expect(gw.watches[0].startRevision).toBeUndefined(); // no list given: from now
    stop2();
  });
});

describe('etcd store: a quiet watch', () => {
  it('stays attached however long nothing changes (the call timeout is not the stream\'s)', async () => {
    const store = await open({ etcdTimeoutMs: 200 });
    const changes: string[] = [];
    const errors: string[] = [];
    const stop = store.watch((why) => changes.push(why), (err) => errors.push(err.message));
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1));
    await tick(1000); // five call timeouts without a byte on the stream
    gw.put(K('10.88.7.0-24'), value(7));
    await vi.waitFor(() => expect(changes).toEqual([`etcd put "${K('10.88.7.0-24')}"`]));
    expect(errors).toEqual([]);
    expect(gw.watches).toHaveLength(1); // never opened again
    stop();
  });
});

describe('etcd store: a watch etcd cancels is made again', () => {
  it('a watch cancelled by etcd (compacted while disconnected): a new one from now, then a full resync', async () => {
    const store = await open();
    const changes: string[] = [];
    const errors: string[] = [];
    const stop = store.watch((why) => changes.push(why), (err) => errors.push(err.message), '41');
    await vi.waitFor(() => expect(gw.watches).toHaveLength(1));
    gw.cancelWatches('etcdserver: mvcc: required revision has been compacted', '50');
    await vi.waitFor(() => expect(changes).toEqual(['etcd watch recreated: full resync']), { timeout: 5000 });
    expect(gw.watches[0].startRevision).toBeUndefined(); // the old revision is gone: from now
    expect(errors.join('\n')).toMatch(/cancelled the watch \(watch cancelled: etcdserver: mvcc: required revision has been compacted \(compacted at revision 50\)\)/);
    // the new watch is live; a key is whatever was written: quoted, it cannot start a log line of its own
    gw.put(K('10.88.9.0-24'), value(9));
    gw.delete(K('10.88.9.0-24'));
    gw.put(K('x\n2030-01-01 FORGED'), 'x');
    await vi.waitFor(() => expect(changes).toHaveLength(4));
    expect(changes.slice(1)).toEqual([`etcd put "${K('10.88.9.0-24')}"`, `etcd delete "${K('10.88.9.0-24')}"`, `etcd put "${K('x\\n2030-01-01 FORGED')}"`]);
    stop();
    await vi.waitFor(() => expect(gw.watches).toHaveLength(0));
  });

  it('a watch from a revision already compacted is made again from now, then a full resync', async () => {
    const store = await open();
    const changes: string[] = [];
    gw.compacted = 30;
    const stop = store.watch((why) => changes.push(why), () => {}, '7');
    await vi.waitFor(() => expect(changes).toContain('etcd watch recreated: full resync'), { timeout: 5000 });
    expect(gw.watches.map((w) => w.startRevision)).toEqual([undefined]);
    stop();
  });
});

describe('etcd store: calls are bounded', () => {
  it('a list against an etcd that accepts connections but never answers (a partition) fails within the bound', async () => {
    const sockets: Socket[] = [];
    const server = createServer((s) => void sockets.push(s)); // accepts, never speaks
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    const store = await EtcdStore.open({ etcdEndpoints: [`http://127.0.0.1:${port}`], etcdTimeoutMs: 800 });
    try {
      const t0 = Date.now();
      const err = await store.list().then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(StoreUnavailable);
      expect((err as Error).message).toMatch(new RegExp(`^etcd http://127.0.0.1:${port} unreachable: `));
      expect(Date.now() - t0).toBeLessThan(2000);
    } finally {
      await store.close();
      sockets.forEach((s) => s.destroy());
      server.close();
    }
  }, 10_000);

  it('endpoints are tried in turn: one down, the next answers', async () => {
    const store = await EtcdStore.open({ etcdEndpoints: ['http://127.0.0.1:1', url] });
    stores.push(store);
    gw.put(K('10.88.1.0-24'), value(1));
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.1']);
  });

  it('a URL that answers but is not etcd\'s gateway: the error names it and what it likely is', async () => {
    const other = createServer((s) => s.end('HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found'));
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const { port } = other.address() as { port: number };
    try {
      const store = await EtcdStore.open({ etcdEndpoints: [`http://127.0.0.1:${port}`] });
      stores.push(store);
      const err = await store.list().then(() => undefined, (e: Error) => e);
      expect(err?.message).toBe(`etcd http://127.0.0.1:${port}: HTTP 404: it does not answer etcd v3's API (not etcd, not its client URL, or an etcd with --enable-grpc-gateway=false?)`);
    } finally {
      other.close();
    }
  });
});

describe('etcd store: writes of our lease', () => {
  it('two renewals at once never revoke the etcd lease the key was just moved to', async () => {
    const store = await open();
    const subnets = { subnet: Prefix.parse('10.88.5.0/24')! };
    const attrs = { publicIP: IP.parse('192.168.88.5')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:05' };
    const key = K('10.88.5.0-24');
    gw.put(key, encodeAttrs(attrs));
    expect(await store.renew(subnets, attrs, 60, encodeAttrs(attrs))).toBe(true); // the key now on an etcd lease of ours
    // the first renewal's answer comes back late: the second has moved the key meanwhile
    gw.answerDelays.push(50, 0);
    const both = await Promise.all([store.renew(subnets, attrs, 60, encodeAttrs(attrs)), store.renew(subnets, attrs, 60, encodeAttrs(attrs))]);
    expect(both).toEqual([true, true]);
    const now = gw.kv.get(key);
    expect(now, 'the key must still be there').toBeDefined();
    expect(gw.revoked).not.toContain(now!.lease);
  });

  it('a renewal guarded by a value the key no longer holds changes nothing; a reservation (ttl 0) is on no etcd lease', async () => {
    const store = await open();
    const subnets = { subnet: Prefix.parse('10.88.6.0/24')! };
    const attrs = { publicIP: IP.parse('192.168.88.6')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:06' };
    gw.put(K('10.88.6.0-24'), 'someone else');
    expect(await store.renew(subnets, attrs, 60, encodeAttrs(attrs))).toBe(false);
    expect(gw.kv.get(K('10.88.6.0-24'))!.value).toBe('someone else');
    expect(await store.renew(subnets, attrs, 0, 'someone else')).toBe(true);
    expect(gw.kv.get(K('10.88.6.0-24'))).toMatchObject({ value: encodeAttrs(attrs), lease: '0' });
  });
});

describe('etcd store: authentication and TLS', () => {
  it('--etcd-username/--etcd-password: a token first, and again when etcd no longer knows it', async () => {
    gw.user = { name: 'flannel', password: 's3cret' };
    gw.put('/coreos.com/network/config', '{"Network":"10.88.0.0/16"}');
    const store = await open({ etcdUsername: 'flannel', etcdPassword: 's3cret' });
    expect(await store.getConfig()).toBe('{"Network":"10.88.0.0/16"}');
    gw.expireTokens();
    expect(await store.getConfig()).toBe('{"Network":"10.88.0.0/16"}');
    const wrong = await open({ etcdUsername: 'flannel', etcdPassword: 'nope' });
    await expect(wrong.getConfig()).rejects.toThrow(/authentication failed/);
    const none = await open();
    await expect(none.getConfig()).rejects.toThrow(/invalid auth token/);
  });

  it('a client certificate and key are presented with or without --etcd-cafile; --etcd-certfile needs --etcd-keyfile', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'flannel-tls-'));
    try {
      const [ca, cert, key] = ['ca', 'cert', 'key'].map((n) => {
        writeFileSync(join(dir, n), `-----BEGIN ${n}-----\n`);
        return join(dir, n);
      });
      const agentOf = async (extra: Record<string, unknown>) => {
        const s = await EtcdStore.open({ etcdEndpoints: ['https://192.0.2.1:2379'], ...extra });
        stores.push(s);
        return (s as unknown as { client: { agent: { options: Record<string, Buffer | undefined> } } }).client.agent.options;
      };
      const withoutCa = await agentOf({ etcdCertFile: cert, etcdKeyFile: key });
      expect([withoutCa.cert?.toString(), withoutCa.key?.toString()]).toEqual(['-----BEGIN cert-----\n', '-----BEGIN key-----\n']);
      expect(String(withoutCa.ca)).not.toContain('-----BEGIN ca-----'); // the system's CAs, not ours
      expect((await agentOf({ etcdCaFile: ca, etcdCertFile: cert, etcdKeyFile: key })).ca?.toString()).toBe('-----BEGIN ca-----\n');
      await expect(EtcdStore.open({ etcdEndpoints: [url], etcdCertFile: cert })).rejects.toThrow(/--etcd-certfile and --etcd-keyfile go together .*only --etcd-certfile was given/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('etcd store: endpoints', () => {
  it('refuses a user or password in an endpoint, and never prints it', async () => {
    for (const endpoint of ['https://root:hunter2@10.0.0.1:2379', 'http://:hunter2@10.0.0.1:2379', 'http://hunter2@ bad']) {
      const err = await EtcdStore.open({ etcdEndpoints: [endpoint] }).then(() => undefined, (e: Error) => e);
      expect(err?.message, endpoint).toMatch(/^--etcd-endpoints: ".*" must not carry a user or password \(use --etcd-username and --etcd-password\)$/);
      expect(err?.message, endpoint).not.toContain('hunter2');
    }
  });
});
