// The embedded file store: the lease store contract (test/support/store-contract.ts)
// and what only it does: leases expire by their "Expiration" and expire() removes them.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP, Prefix } from '../../../../src/net/ip';
import { FileStore, type FileStoreOptions } from '../../../../src/flannel/store/file-store';
import { realIo, type FileIo } from '../../../../src/flannel/store/lease-files';
import { waitFor } from '../../../support/wait';
import { acquireLease } from '../../../../src/flannel/store/acquire';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import { LeaseAttrs } from '../../../../src/flannel/lease';
import { leaseStoreContract } from '../../../support/store-contract';

const P = (s: string) => Prefix.parse(s)!;

leaseStoreContract('FileStore', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'flannel-filestore-'));
  return { store: new FileStore(dir), dispose: () => rmSync(dir, { recursive: true, force: true }) };
});

// The same, while a watch runs: lists then read what the notifications named, not every file.
leaseStoreContract('FileStore, watched', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'flannel-filestore-'));
  const store = new FileStore(dir);
  store.watch(() => {}, () => {});
  return { store, dispose: () => rmSync(dir, { recursive: true, force: true }) };
});

describe('file store: expiry', () => {
  let dir: string;
  let store: FileStore;
  const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan"}}');
  const attrs = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-filestore-'));
    store = new FileStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('expired leases are free again and are removed by expire()', async () => {
    await store.create({ subnet: P('10.88.3.0/26') }, attrs(1), -1);
    expect((await store.list()).leases).toHaveLength(0);
    const a = await acquireLease(store, cfg, attrs(2), { ttlS: 60, previous: { subnet: P('10.88.3.0/26') } });
    expect(a.subnet?.toString()).toBe('10.88.3.0/26');
    await store.create({ subnet: P('10.88.3.64/26') }, attrs(3), -1);
    await store.expire();
    expect((await store.list()).leases.map((l) => l.subnet?.toString())).toEqual(['10.88.3.0/26']);
  });});

describe('file store: watching by notification', () => {
  const HOUR = 3_600_000;
  let dir: string;
  let stores: FileStore[];
  const attrs = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
  const leaseText = (n: number) => JSON.stringify({ PublicIP: `192.168.88.${n}`, BackendType: 'vxlan', BackendData: { VNI: 1, VtepMAC: `0a:00:00:00:00:${n.toString(16).padStart(2, '0')}` }, Expiration: new Date(Date.now() + HOUR).toISOString() });
  /** As another process writes a lease (the CNI plugin, another daemon, an operator): a temporary file renamed over the lease. */
  const writeLease = (name: string, n: number) => {
    writeFileSync(join(dir, 'subnets', `.${name}.tmp`), leaseText(n));
    renameSync(join(dir, 'subnets', `.${name}.tmp`), join(dir, 'subnets', name));
  };
  const open = (opts: FileStoreOptions = {}) => {
    const s = new FileStore(dir, opts);
    stores.push(s);
    return s;
  };
  /** File-system calls counted, and inotify's notifications passed on only while `deliver` says so. */
  const counting = () => {
    const c = { reads: 0, stamps: 0, deliver: true, onEvent: undefined as undefined | ((name: string | null) => void) };
    const io: Partial<FileIo> = {
      readFile: (p) => (c.reads++, realIo.readFile(p)),
      stamp: (p) => (c.stamps++, realIo.stamp(p)),
      watch: (d, onEvent, onError) => {
        c.onEvent = onEvent;
        return realIo.watch(d, (name) => c.deliver && onEvent(name), onError);
      },
    };
    return { c, io };
  };
  const watched = (store: FileStore) => {
    const changes: string[] = [];
    const errors: string[] = [];
    const stop = store.watch((why) => changes.push(why), (err) => errors.push(err.message));
    return { changes, errors, stop };
  };
  const subnetsListed = async (s: FileStore) => (await s.list()).leases.map((l) => l.subnet?.toString()).sort();

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-filestore-'));
    mkdirSync(join(dir, 'subnets'));
    stores = [];
  });
  afterEach(async () => {
    for (const s of stores) await s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a lease another process writes is reported by its notification, with no poll to wait for', async () => {
    const store = open({ checkMs: HOUR, rescanMs: HOUR }); // no check runs within the test: only inotify can tell
    const w = watched(store);
    writeLease('10.88.7.0-24', 7);
    await waitFor('the notification of the new lease', () => w.changes.length > 0);
    expect(w.changes[0]).toContain('10.88.7.0-24');
    expect(await subnetsListed(store)).toEqual(['10.88.7.0/24']);
    expect(w.errors).toEqual([]);
  });

  it('with a watch running, a list after one lease changed reads that file only, however many there are', async () => {
    for (let i = 1; i <= 200; i++) writeLease(`10.${88 + (i >> 8)}.${i & 255}.0-24`, i);
    const { c, io } = counting();
    const store = open({ io, checkMs: HOUR, rescanMs: HOUR });
    const w = watched(store);
    expect((await store.list()).leases).toHaveLength(200);
    c.reads = c.stamps = 0;
    writeLease('10.88.17.0-24', 99); // lease 17 changes hands
    await waitFor('the notification of the change', () => w.changes.length > 0);
    const { leases } = await store.list();
    expect(leases.find((l) => l.subnet?.toString() === '10.88.17.0/24')?.attrs.publicIP?.toString()).toBe('192.168.88.99');
    expect(c.reads).toBe(1);
    expect(c.stamps).toBeLessThanOrEqual(2);
  });

  it('without a watch, a list stats every file but reads only the changed one', async () => {
    for (let i = 1; i <= 50; i++) writeLease(`10.88.${i}.0-24`, i);
    const { c, io } = counting();
    const store = open({ io });
    expect((await store.list()).leases).toHaveLength(50);
    c.reads = c.stamps = 0;
    writeLease('10.88.17.0-24', 99);
    expect((await store.list()).leases).toHaveLength(50);
    expect(c.reads).toBe(1);
    expect(c.stamps).toBe(51); // every file once, the changed one again as it is read
  });

  it('a lost notification of a file added or replaced is caught by the directory check', async () => {
    const { c, io } = counting();
    const store = open({ io, checkMs: 50, rescanMs: HOUR });
    const w = watched(store);
    c.deliver = false; // inotify's queue overflowed: nothing arrives
    writeLease('10.88.8.0-24', 8);
    await waitFor('the directory check to see the new lease', () => w.changes.length > 0);
    expect(w.changes[0]).toMatch(/without a notification/);
    expect(await subnetsListed(store)).toEqual(['10.88.8.0/24']);
  });

  it('a lost notification of a file edited in place is caught by the slower scan of every file', async () => {
    writeLease('10.88.9.0-24', 9);
    const { c, io } = counting();
    const store = open({ io, checkMs: HOUR, rescanMs: 50 });
    const w = watched(store);
    expect((await store.list()).leases[0].attrs.publicIP?.toString()).toBe('192.168.88.9');
    c.deliver = false;
    writeFileSync(join(dir, 'subnets', '10.88.9.0-24'), leaseText(10)); // in place: the directory does not move
    await waitFor('the scan to see the edited lease', () => w.changes.length > 0);
    expect((await store.list()).leases[0].attrs.publicIP?.toString()).toBe('192.168.88.10');
  });

  it('a notification without a name (inotify overflowed) makes the next list look at every file', async () => {
    const { c, io } = counting();
    const store = open({ io, checkMs: HOUR, rescanMs: HOUR });
    const w = watched(store);
    expect(await subnetsListed(store)).toEqual([]);
    c.deliver = false;
    writeLease('10.88.5.0-24', 5);
    writeLease('10.88.6.0-24', 6);
    expect(await subnetsListed(store)).toEqual([]); // nothing notified: the picture is as it was
    c.onEvent!(null);
    await waitFor('the change to be passed on', () => w.changes.length > 0);
    expect(await subnetsListed(store)).toEqual(['10.88.5.0/24', '10.88.6.0/24']);
  });

  it('create reads the disk under the lock: a lease not notified yet still blocks an overlapping one', async () => {
    const { c, io } = counting();
    const store = open({ io, checkMs: HOUR, rescanMs: HOUR });
    watched(store);
    c.deliver = false;
    expect(await open().create({ subnet: P('10.88.3.0/24') }, attrs(1), 60)).toBe(true);
    expect(await store.create({ subnet: P('10.88.3.0/25') }, attrs(2), 60)).toBe(false);
    expect(await store.create({ subnet: P('10.88.4.0/24') }, attrs(2), 60)).toBe(true);
  });

  it('a lease that expires is reported as it expires, with no file changing', async () => {
    const store = open({ checkMs: 20, rescanMs: HOUR });
    await store.create({ subnet: P('10.88.3.0/24') }, attrs(1), 0.3);
    expect(await subnetsListed(store)).toEqual(['10.88.3.0/24']);
    const w = watched(store);
    await waitFor('the expiry to be reported', () => w.changes.includes('a lease expired'));
    expect(await subnetsListed(store)).toEqual([]);
  });
});
