// The etcd store's own logic, without an etcd: the client library (etcd3) is
// replaced by a fake that records what the store asks of it, or, where the
// real client's behaviour matters (timeouts), the real library talks to a
// local TCP server that never answers. Real etcd is in the integration tests.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventEmitter } from 'node:events';
import { Socket, createServer } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const lib = vi.hoisted(() => ({ fake: undefined as unknown }));
vi.mock('../../../../src/flannel/store/etcd-client', () => ({
  // vitest cannot load etcd3's .proto files as text the way the bundle does; the library finds them itself here
  loadEtcd3: async () => lib.fake ?? (await import('etcd3')),
}));

import { EtcdStore, grpcReason } from '../../../../src/flannel/store/etcd-store';
import { StoreUnavailable } from '../../../../src/flannel/manager';
import { encodeAttrs } from '../../../../src/flannel/lease';
import { IP, Prefix } from '../../../../src/net/ip';

class FakeWatcher extends EventEmitter {
  cancelled = false;
  async cancel(): Promise<void> {
    this.cancelled = true;
  }
}

/** Records each watch the store creates: its request and the watcher handed back. */
class FakeEtcd3 {
  static last: FakeEtcd3;
  readonly watches: { prefix?: string; startRevision?: string; watcher: FakeWatcher }[] = [];
  /** The next create() calls fail with these (etcd refusing the watch: compacted revision, down). */
  readonly createFailures: Error[] = [];
  /** Keys, each on an etcd lease ('0': none); revoking a lease deletes its keys, as etcd does. */
  readonly kv = Object.assign(new Map<string, { value: string; lease: string }>(), {
    /** create's transaction: recorded, and applied as a success */
    txn: async (req: { compare: { mod_revision?: string }[]; success: { request_put: { key: Buffer; value: Buffer; lease: string } }[] }) => {
      this.txns.push(req);
      for (const { request_put: put } of req.success) this.kv.set(put.key.toString(), { value: put.value.toString(), lease: String(put.lease) });
      return { succeeded: true, header: { revision: String(++this.revision) } };
    },
  });
  readonly revoked: string[] = [];
  private nextLease = 1000;
  /** How long each successive txn's answer takes to come back (applied at once, answered late). */
  readonly answerDelays: number[] = [];
  readonly leaseClient = {
    leaseGrant: async () => ({ ID: String(this.nextLease++) }),
    leaseRevoke: async ({ ID }: { ID: string }) => {
      this.revoked.push(ID);
      for (const [k, v] of this.kv) if (v.lease === ID) this.kv.delete(k);
      return {};
    },
  };
  put(key: string) {
    const op = { key, value: '', lease: '0' };
    const b = { value: (v: string) => ((op.value = v), b), lease: (id: string) => ((op.lease = String(id)), b), op };
    return b;
  }
  if(key: string, target: string, _cmp: string, expected: string | number) {
    let put: ReturnType<FakeEtcd3['put']>;
    const b = {
      then: (p: ReturnType<FakeEtcd3['put']>) => ((put = p), b),
      commit: async () => {
        const cur = this.kv.get(key);
        const ok = target === 'Value' ? cur?.value === expected : !!cur;
        if (ok) this.kv.set(put.op.key, { value: put.op.value, lease: put.op.lease });
        await tick(this.answerDelays.shift() ?? 0);
        return { succeeded: ok };
      },
    };
    return b;
  }
  /** Range reads of every lease (getAll), and the transactions create sent. */
  ranges = 0;
  readonly txns: { compare: { mod_revision?: string }[] }[] = [];
  revision = 41;
  /** Holds the next range read until it is released (a read that takes its time). */
  holdRead?: Promise<void>;
  getAll() {
    const b = {
      prefix: (p: string) => {
        const exec = async () => {
          this.ranges++;
          const revision = this.revision;
          if (this.holdRead) await this.holdRead;
          const kvs = [...this.kv].filter(([k]) => k.startsWith(p)).map(([k, v]) => ({ key: Buffer.from(k), value: Buffer.from(v.value), lease: v.lease, mod_revision: '1' }));
          return { header: { revision: String(revision) }, kvs };
        };
        return { exec };
      },
    };
    return b;
  }
  constructor(readonly options: Record<string, unknown>) {
    FakeEtcd3.last = this;
  }
  watch() {
    const req: { prefix?: string; startRevision?: string } = {};
    const builder = {
      prefix: (p: string) => ((req.prefix = p), builder),
      startRevision: (r: string) => ((req.startRevision = String(r)), builder),
      create: async () => {
        const failure = this.createFailures.shift();
        if (failure) throw failure;
        const watcher = new FakeWatcher();
        this.watches.push({ ...req, watcher });
        return watcher;
      },
    };
    return builder;
  }
  close() {}
}

const open = (extra: Record<string, unknown> = {}) => EtcdStore.open({ etcdEndpoints: ['http://192.0.2.1:2379'], ...extra });
const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

afterEach(() => {
  lib.fake = undefined;
});

describe('etcd store: create', () => {
  const attrs = { publicIP: IP.parse('192.168.88.1')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:01' };
  const P = (t: string) => Prefix.parse(t)!;

  it('with the list the subnets were chosen from, reads no range again and guards the write by that list\'s revision', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const fake = FakeEtcd3.last;
    fake.kv.set('/coreos.com/network/subnets/10.88.1.0-24', { value: encodeAttrs({ ...attrs, publicIP: IP.parse('192.168.88.2')! }), lease: '7' });
    const listed = await store.list();
    expect(fake.ranges).toBe(1);
    fake.revision = 50; // written since: the write must still be guarded by the list's revision, 41
    expect(await store.create({ subnet: P('10.88.1.0/25') }, attrs, 60, listed)).toBe(false); // overlaps a listed lease
    expect(await store.create({ subnet: P('10.88.2.0/24') }, attrs, 60, listed)).toBe(true);
    expect(fake.ranges).toBe(1);
    expect(fake.txns.at(-1)!.compare[1].mod_revision).toBe('42');
    // without it, create lists first (and is guarded by that list's revision)
    expect(await store.create({ subnet: P('10.88.3.0/24') }, attrs, 60)).toBe(true);
    expect(fake.ranges).toBe(2);
    expect(fake.txns.at(-1)!.compare[1].mod_revision).toBe('52'); // listed at 51, after the first create's write
  });
});

describe('etcd store: lists answered from the watch', () => {
  const value = (n: number) => Buffer.from(encodeAttrs({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` }));
  const key = (s: string) => Buffer.from(`/coreos.com/network/subnets/${s}`);
  const put = (w: FakeWatcher, s: string, n: number, rev: number) => w.emit('put', { key: key(s), value: value(n), mod_revision: String(rev), lease: '7' });
  const del = (w: FakeWatcher, s: string, rev: number) => w.emit('delete', { key: key(s), value: Buffer.from(''), mod_revision: String(rev), lease: '0' });
  const ips = async (store: EtcdStore) => (await store.list()).leases.map((l) => `${l.subnet} ${l.attrs.publicIP}`).sort();
  /** A store with one lease, listed (a range read at revision 41), and a watch from that list. */
  const watched = async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const fake = FakeEtcd3.last;
    fake.kv.set('/coreos.com/network/subnets/10.88.1.0-24', { value: value(1).toString(), lease: '7' });
    const { revision } = await store.list();
    const changes: string[] = [];
    const stop = store.watch((why) => changes.push(why), () => {}, revision);
    await tick();
    return { store, fake, w: fake.watches[0].watcher, changes, stop };
  };
  afterEach(() => vi.useRealTimers());

  it('while the watch runs, a list after a change is made from the watch\'s events: no range read of every lease', async () => {
    const { store, fake, w, stop } = await watched();
    expect(fake.ranges).toBe(1);
    put(w, '10.88.2.0-24', 2, 42);
    put(w, '10.88.1.0-24', 9, 43); // lease 1 changes hands
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.9', '10.88.2.0/24 192.168.88.2']);
    del(w, '10.88.2.0-24', 44);
    const list = await store.list();
    expect(list.leases.map((l) => l.subnet?.toString())).toEqual(['10.88.1.0/24']);
    expect(list.revision).toBe('44');
    expect(fake.ranges).toBe(1);
    stop();
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.1']); // no watch: a range read (the fake's keys never had those events)
    expect(fake.ranges).toBe(2);
  });

  it('our own write: lists read the range until the watch brings the write back', async () => {
    const { store, fake, w, stop } = await watched();
    expect(await store.create({ subnet: Prefix.parse('10.88.5.0/24')! }, { publicIP: IP.parse('192.168.88.5')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:05' }, 60)).toBe(true);
    const reads = fake.ranges;
    expect((await ips(store)).some((l) => l.startsWith('10.88.5.0/24'))).toBe(true);
    expect(fake.ranges).toBe(reads + 1);
    put(w, '10.88.5.0-24', 5, fake.revision); // the watch delivers our write
    expect((await ips(store)).some((l) => l.startsWith('10.88.5.0/24'))).toBe(true);
    expect(fake.ranges).toBe(reads + 1);
    stop();
  });

  it('a watch that broke: the next list reads the range, and lists are made from memory again after it', async () => {
    const { store, fake, w, stop } = await watched();
    w.emit('disconnected', new Error('14 UNAVAILABLE: No connection established'));
    await store.list();
    expect(fake.ranges).toBe(2);
    await store.list(); // etcd answers, but the watch is not attached again yet: still read
    expect(fake.ranges).toBe(3);
    w.emit('connected', {}); // etcd3 re-attached it
    await store.list();
    expect(fake.ranges).toBe(4);
    await store.list();
    expect(fake.ranges).toBe(4);
    // an event without a revision cannot be placed: read the range
    w.emit('put', { key: key('10.88.3.0-24') });
    await store.list();
    expect(fake.ranges).toBe(5);
    stop();
  });

  it('events that come while a range read is in flight are applied over its result', async () => {
    const { store, fake, w, stop } = await watched();
    w.emit('disconnected', new Error('gone'));
    w.emit('connected', {});
    let release!: () => void;
    fake.holdRead = new Promise((r) => (release = r));
    const reading = store.list(); // reads at revision 41
    await tick();
    put(w, '10.88.2.0-24', 2, 42); // arrives before the read's answer, not in it
    fake.holdRead = undefined;
    release();
    await reading;
    expect(await ips(store)).toEqual(['10.88.1.0/24 192.168.88.1', '10.88.2.0/24 192.168.88.2']);
    expect(fake.ranges).toBe(2);
    stop();
  });

  it('the range is read at least every 10 s, whatever the watch says', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { store, fake, stop } = await watched();
    await store.list();
    expect(fake.ranges).toBe(1);
    vi.advanceTimersByTime(10_000);
    await store.list();
    expect(fake.ranges).toBe(2);
    stop();
  });
});

describe('etcd store: watch', () => {
  it('starts at the revision after the caller\'s list, so a change between the list and the watch is replayed', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const stop = store.watch(() => {}, () => {}, '41');
    await tick();
    expect(FakeEtcd3.last.watches.map(({ prefix, startRevision }) => ({ prefix, startRevision }))).toEqual([
      { prefix: '/coreos.com/network/subnets/', startRevision: '42' },
    ]);
    stop();
    const stop2 = store.watch(() => {}, () => {});
    await tick();
    expect(FakeEtcd3.last.watches[1].startRevision).toBeUndefined(); // no list given: from now
    stop2();
  });
});

describe('etcd store: a watch etcd cancels is made again', () => {
  it('a watcher cancelled by etcd (compacted while disconnected): a new one from now, then a full resync', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const changes: string[] = [];
    const errors: string[] = [];
    const stop = store.watch((why) => changes.push(why), (err) => errors.push(err.message), '41');
    await tick();
    const fake = FakeEtcd3.last;
    expect(fake.watches).toHaveLength(1);
    // what etcd3 does when etcd cancels a watch: the watcher is dropped, 'error' is all that is left
    fake.watches[0].watcher.emit('error', new Error('Watcher canceled: etcdserver: mvcc: required revision has been compacted'));
    await vi.waitFor(() => expect(fake.watches).toHaveLength(2), { timeout: 3000 });
    expect(fake.watches[1].startRevision).toBeUndefined(); // the old revision is gone: from now
    await vi.waitFor(() => expect(changes).toEqual(['etcd watch recreated: full resync']), { timeout: 1000 });
    expect(errors.join('\n')).toMatch(/cancelled the watch .*compacted/);
    // and the new watcher is live
    fake.watches[1].watcher.emit('put', { key: Buffer.from('/coreos.com/network/subnets/10.88.9.0-24') });
    expect(changes.at(-1)).toBe('etcd put "/coreos.com/network/subnets/10.88.9.0-24"');
    // a key is whatever was written: quoted, it cannot start a log line of its own
    fake.watches[1].watcher.emit('delete', { key: Buffer.from('/coreos.com/network/subnets/x\n2030-01-01 FORGED') });
    expect(changes.at(-1)).toBe('etcd delete "/coreos.com/network/subnets/x\\n2030-01-01 FORGED"');
    stop();
    expect(fake.watches[1].watcher.cancelled).toBe(true);
  });

  it('a watch etcd refuses to create (its start revision already compacted) is retried from now, then a full resync', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const changes: string[] = [];
    const fake = FakeEtcd3.last;
    fake.createFailures.push(new Error('Watcher canceled: etcdserver: mvcc: required revision has been compacted'));
    const stop = store.watch((why) => changes.push(why), () => {}, '7');
    await vi.waitFor(() => expect(fake.watches).toHaveLength(1), { timeout: 3000 });
    expect(fake.watches[0].startRevision).toBeUndefined();
    await vi.waitFor(() => expect(changes).toContain('etcd watch recreated: full resync'), { timeout: 1000 });
    stop();
  });
});

describe('etcd store: calls are bounded', () => {
  it('a list against an etcd that accepts connections but never answers (a partition) fails within the bound, retries included', async () => {
    const sockets: Socket[] = [];
    const server = createServer((s) => void sockets.push(s)); // accepts, never speaks
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    const store = await EtcdStore.open({ etcdEndpoints: [`http://127.0.0.1:${port}`], etcdTimeoutMs: 800 });
    try {
      const t0 = Date.now();
      const err = await store.list().then(() => undefined, (e: unknown) => e);
      const took = Date.now() - t0;
      expect(err).toBeInstanceOf(StoreUnavailable);
      expect((err as Error).message).toMatch(new RegExp(`^etcd http://127.0.0.1:${port} unreachable: `));
      expect(took).toBeLessThan(2000); // etcd3 alone: three attempts of the call deadline each
    } finally {
      await store.close();
      sockets.forEach((s) => s.destroy());
      server.close();
    }
  }, 10_000);
});

describe('etcd store: writes of our lease', () => {
  it('two renewals at once never revoke the etcd lease the key was just moved to', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const fake = FakeEtcd3.last;
    const subnets = { subnet: Prefix.parse('10.88.5.0/24')! };
    const attrs = { publicIP: IP.parse('192.168.88.5')!, backendType: 'vxlan', vni: 1, vtepMAC: '0a:00:00:00:00:05' };
    const key = '/coreos.com/network/subnets/10.88.5.0-24';
    fake.kv.set(key, { value: encodeAttrs(attrs), lease: '0' });
    expect(await store.renew(subnets, attrs, 60, encodeAttrs(attrs))).toBe(true); // the key now on an etcd lease of ours
    // the first renewal's answer comes back late: the second has moved the key meanwhile
    fake.answerDelays.push(50, 0);
    const both = await Promise.all([store.renew(subnets, attrs, 60, encodeAttrs(attrs)), store.renew(subnets, attrs, 60, encodeAttrs(attrs))]);
    expect(both).toEqual([true, true]);
    const now = fake.kv.get(key);
    expect(now, 'the key must still be there').toBeDefined();
    expect(fake.revoked).not.toContain(now!.lease);
  });
});

describe('etcd store: TLS', () => {
  const pem = (dir: string, name: string) => {
    writeFileSync(join(dir, name), `-----BEGIN ${name}-----\n`);
    return join(dir, name);
  };
  it('a client certificate and key are presented with or without --etcd-cafile', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const dir = mkdtempSync(join(tmpdir(), 'flannel-tls-'));
    try {
      const [ca, cert, key] = ['ca', 'cert', 'key'].map((n) => pem(dir, n));
      await open({ etcdCertFile: cert, etcdKeyFile: key });
      const creds = FakeEtcd3.last.options.credentials as Record<string, Buffer | null>;
      expect(creds?.certChain?.toString()).toBe('-----BEGIN cert-----\n');
      expect(creds?.privateKey?.toString()).toBe('-----BEGIN key-----\n');
      expect(creds?.rootCertificate).toBeNull(); // the server is checked against grpc's default roots
      await open({ etcdCaFile: ca, etcdCertFile: cert, etcdKeyFile: key });
      expect((FakeEtcd3.last.options.credentials as Record<string, Buffer>).rootCertificate.toString()).toBe('-----BEGIN ca-----\n');
      await open({ etcdCaFile: ca });
      expect(Object.keys(FakeEtcd3.last.options.credentials as object)).toEqual(['rootCertificate']);
      await open();
      expect(FakeEtcd3.last.options.credentials).toBeUndefined();
      await expect(open({ etcdCertFile: cert })).rejects.toThrow(/--etcd-certfile and --etcd-keyfile go together .*only --etcd-certfile was given/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('grpcReason', () => {
  it('keeps the cause of a grpc-js error and drops its code and resolution note', () => {
    expect(
      grpcReason('14 UNAVAILABLE: No connection established. Last error: Error: connect ECONNREFUSED 127.0.0.1:1. Resolution note: '),
    ).toBe('connect ECONNREFUSED 127.0.0.1:1');
    expect(grpcReason('4 DEADLINE_EXCEEDED: Deadline exceeded after 5.001s')).toBe('Deadline exceeded after 5.001s');
    expect(grpcReason('no answer within 5 s')).toBe('no answer within 5 s');
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
