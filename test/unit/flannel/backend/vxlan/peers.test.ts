import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP, Prefix } from '../../../../../src/net/ip';
import { Actual, PlanError, applyPlan, desiredPeers, planPeers } from '../../../../../src/flannel/backend/vxlan/peers';
import { Runner, setRunner } from '../../../../../src/iproute/exec';
import { FileStore } from '../../../../../src/flannel/store/file-store';
import { acquireLease, pickFree } from '../../../../../src/flannel/store/acquire';
import { parseNetworkConfig } from '../../../../../src/flannel/netconfig';
import { Lease, LeaseAttrs, encodeAttrs } from '../../../../../src/flannel/lease';

const P = (s: string) => Prefix.parse(s)!;
const net = P('10.88.0.0/16');
const self = { subnet: P('10.88.1.0/24'), publicIP: IP.parse('192.168.88.1')!, vni: 1 };
const lease = (subnet: string, ip: string, mac: string, extra: Partial<LeaseAttrs> = {}): Lease => ({
  subnet: P(subnet),
  attrs: { publicIP: IP.parse(ip)!, backendType: 'vxlan', vni: 1, vtepMAC: mac, ...extra },
});
const empty: Actual = { neigh: [], fdb: [], routes: [] };
const A = lease('10.88.2.0/24', '192.168.88.2', '0a:00:00:00:00:02');
const B = lease('10.88.3.0/24', '192.168.88.3', '0a:00:00:00:00:03');
const programmed = (mac = A.attrs.vtepMAC!, ip = '192.168.88.2'): Actual => ({
  neigh: [{ dst: '10.88.2.0', lladdr: mac, state: ['PERMANENT'] }],
  fdb: [{ mac, dst: ip, flags: ['self'], state: 'permanent' }],
  routes: [{ dst: '10.88.2.0/24', gateway: '10.88.2.0', flags: ['onlink'] }],
});

describe('desired peers', () => {
  it('skips our own lease, other backends, other VNIs, our PublicIP, outside the network, without a MAC', () => {
    const { peers, skipped } = desiredPeers(
      [
        lease('10.88.1.0/24', '192.168.88.1', '0a:00:00:00:00:01'),
        A,
        lease('10.88.4.0/24', '192.168.88.4', '0a:00:00:00:00:04', { backendType: 'host-gw' }),
        lease('10.88.5.0/24', '192.168.88.5', '0a:00:00:00:00:05', { vni: 2 }),
        lease('10.88.6.0/24', '192.168.88.1', '0a:00:00:00:00:06'),
        lease('10.99.0.0/24', '192.168.88.7', '0a:00:00:00:00:07'),
        lease('10.88.8.0/24', '192.168.88.8', undefined as unknown as string),
      ],
      self,
      net,
    );
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24']);
    expect(skipped).toHaveLength(5);
  });
});

describe('VTEP MACs that would hijack traffic', () => {
  const selfMac = { ...self, mac: '0a:00:00:00:00:01' };
  it('a lease advertising our own VTEP MAC is skipped', () => {
    const { peers, skipped } = desiredPeers([A, lease('10.88.9.0/24', '192.168.88.9', '0A:00:00:00:00:01')], selfMac, net);
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24']);
    expect(skipped).toEqual(['lease 10.88.9.0/24: BackendData.VtepMAC 0a:00:00:00:00:01 is this node\'s own VTEP MAC']);
  });
  it('two leases with one MAC for different nodes: neither is programmed (which one is real cannot be told)', () => {
    const thief = lease('10.88.9.0/24', '192.168.88.9', A.attrs.vtepMAC!);
    const { peers, skipped } = desiredPeers([A, B, thief], selfMac, net);
    expect(peers.map((p) => p.subnet.toString())).toEqual(['10.88.3.0/24']);
    expect(skipped).toEqual([
      'lease 10.88.2.0/24: BackendData.VtepMAC 0a:00:00:00:00:02 is also advertised by lease 10.88.9.0/24: neither is programmed',
      'lease 10.88.9.0/24: BackendData.VtepMAC 0a:00:00:00:00:02 is also advertised by lease 10.88.2.0/24: neither is programmed',
    ]);
    // and a hijacker that was programmed before loses its FDB entry, the victim's stays out of the FDB
    const plan = planPeers(peers, programmed(), 'flannel.1', net);
    expect(plan.bridge).toContainEqual(['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self']);
  });
  it('two leases of one node (same MAC, same PublicIP) both stay', () => {
    const second = lease('10.88.9.0/24', '192.168.88.2', A.attrs.vtepMAC!);
    expect(desiredPeers([A, second], selfMac, net).peers.map((p) => p.subnet.toString())).toEqual(['10.88.2.0/24', '10.88.9.0/24']);
  });
  it('multicast and all-zero MACs are refused', () => {
    const { peers, skipped } = desiredPeers(
      [lease('10.88.8.0/24', '192.168.88.8', '01:00:5e:00:00:01'), lease('10.88.9.0/24', '192.168.88.9', '00:00:00:00:00:00'), lease('10.88.7.0/24', '192.168.88.7', 'ff:ff:ff:ff:ff:ff')],
      selfMac,
      net,
    );
    expect(peers).toEqual([]);
    expect(skipped).toEqual([
      'lease 10.88.8.0/24: BackendData.VtepMAC 01:00:5e:00:00:01 is not a unicast MAC',
      'lease 10.88.9.0/24: BackendData.VtepMAC 00:00:00:00:00:00 is not a unicast MAC',
      'lease 10.88.7.0/24: BackendData.VtepMAC ff:ff:ff:ff:ff:ff is not a unicast MAC',
    ]);
  });
});

describe('planning peers', () => {
  it('a new peer: neighbour, then FDB, then route, all replace', () => {
    const { peers } = desiredPeers([A], self, net);
    const plan = planPeers(peers, empty, 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', '10.88.2.0', 'lladdr', '0a:00:00:00:00:02', 'dev', 'flannel.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([['fdb', 'replace', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent']]);
    expect(plan.ipLast).toEqual([['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink']]);
  });
  it('nothing to do when the kernel matches', () => {
    const plan = planPeers(desiredPeers([A], self, net).peers, programmed(), 'flannel.1', net);
    expect(plan.changes).toEqual([]);
  });
  it('a removed peer: route, then FDB, then neighbour go', () => {
    const plan = planPeers([], programmed(), 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['route', 'del', '10.88.2.0/24', 'dev', 'flannel.1']]);
    expect(plan.bridge).toEqual([['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self']]);
    expect(plan.ipLast).toEqual([['neigh', 'del', '10.88.2.0', 'dev', 'flannel.1']]);
  });
  it('a peer\'s MAC changed: neighbour replaced, new FDB entry, the stale one removed, route kept', () => {
    const moved = lease('10.88.2.0/24', '192.168.88.2', '0a:00:00:00:00:99');
    const plan = planPeers(desiredPeers([moved], self, net).peers, programmed(), 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', '10.88.2.0', 'lladdr', '0a:00:00:00:00:99', 'dev', 'flannel.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([
      ['fdb', 'replace', '0a:00:00:00:00:99', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent'],
      ['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self'],
    ]);
    expect(plan.ipLast).toEqual([]);
  });
  it('a peer\'s IP changed: the one FDB entry is rewritten in place', () => {
    const plan = planPeers(desiredPeers([A], self, net).peers, programmed(A.attrs.vtepMAC, '192.168.88.42'), 'flannel.1', net);
    expect(plan.bridge).toEqual([['fdb', 'replace', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent']]);
  });
  it('hand-made drift: a wrong route gateway, an appended FDB remote, unknown entries; foreign routes left alone', () => {
    const actual: Actual = {
      neigh: [
        { dst: '10.88.2.0', lladdr: '0a:00:00:00:00:02', state: ['PERMANENT'] },
        { dst: '10.88.77.0', lladdr: '0a:00:00:00:00:77', state: ['PERMANENT'] },
        { dst: '10.88.78.0', state: ['FAILED'] },
      ],
      fdb: [
        { mac: '0a:00:00:00:00:02', dst: '192.168.88.2', state: 'permanent' },
        { mac: '0a:00:00:00:00:02', dst: '192.168.88.50', state: 'permanent' },
        { mac: '0a:00:00:00:00:77', dst: '192.168.88.77', state: 'permanent' },
        { mac: '33:33:00:00:00:01', flags: ['self'], state: 'permanent' },
      ],
      routes: [
        { dst: '10.88.2.0/24', gateway: '10.88.9.9', flags: ['onlink'] },
        { dst: '10.88.77.0/24', gateway: '10.88.77.0', flags: ['onlink'] },
        { dst: '172.30.0.0/16', gateway: '10.88.2.0', flags: ['onlink'] },
      ],
    };
    const plan = planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['route', 'del', '10.88.77.0/24', 'dev', 'flannel.1']]);
    expect(plan.bridge).toEqual([
      ['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self'],
      ['fdb', 'del', '0a:00:00:00:00:02', 'dst', '192.168.88.50', 'dev', 'flannel.1', 'self'],
      ['fdb', 'replace', '0a:00:00:00:00:02', 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent'],
      ['fdb', 'del', '0a:00:00:00:00:77', 'dst', '192.168.88.77', 'dev', 'flannel.1', 'self'],
    ]);
    expect(plan.ipLast).toEqual([
      ['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink'],
      ['neigh', 'del', '10.88.77.0', 'dev', 'flannel.1'],
    ]);
  });
  it('routes of an earlier Network (a subnet via its own address, onlink) go; other routes outside the network stay', () => {
    const actual: Actual = {
      ...programmed(),
      routes: [
        ...programmed().routes,
        { dst: '10.77.5.0/24', gateway: '10.77.5.0', flags: ['onlink'] }, // the overlay was 10.77.0.0/16 before
        { dst: '172.30.0.0/16', gateway: '10.88.2.0', flags: ['onlink'] }, // an operator's
        { dst: '192.0.2.0/24', gateway: '192.0.2.0' }, // not onlink: not ours either
      ],
    };
    const plan = planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net);
    expect(plan.ipFirst).toEqual([['route', 'del', '10.77.5.0/24', 'dev', 'flannel.1']]);
    expect(plan.changes).toEqual(['route 10.77.5.0/24: removed (no lease)']);
  });
  it('two peers, one programmed: only the other is added', () => {
    const plan = planPeers(desiredPeers([A, B], self, net).peers, programmed(), 'flannel.1', net);
    expect(plan.changes).toHaveLength(3);
    expect(plan.changes.every((c) => c.includes('10.88.3.0') || c.includes('0a:00:00:00:00:03'))).toBe(true);
  });
});

describe('DirectRouting', () => {
  const underlay = [P('192.168.88.0/24')];
  const far = lease('10.88.4.0/24', '172.16.9.4', '0a:00:00:00:00:04');

  it('a peer on a directly connected underlay subnet gets a plain route via its public address, no neighbour or FDB entry', () => {
    const peers = desiredPeers([A, far], self, net).peers;
    const plan = planPeers(peers, { ...empty, direct: [] }, 'flannel.1', net, underlay);
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '192.168.88.2']);
    expect(plan.ipFirst.concat(plan.bridge, plan.ipLast).filter((l) => l.includes('10.88.2.0') || l.includes(A.attrs.vtepMAC!))).toEqual([]);
    // the other peer is not on a connected subnet: VXLAN as before
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.4.0/24', 'via', '10.88.4.0', 'dev', 'flannel.1', 'onlink']);
    expect(plan.bridge).toContainEqual(['fdb', 'replace', '0a:00:00:00:00:04', 'dst', '172.16.9.4', 'dev', 'flannel.1', 'self', 'permanent']);
  });

  it('in place: nothing to do', () => {
    const actual: Actual = { ...empty, direct: [{ dst: '10.88.2.0/24', gateway: '192.168.88.2', dev: 'eth0' }] };
    expect(planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net, underlay).changes).toEqual([]);
  });

  it('VXLAN -> direct: the VTEP route, neighbour and FDB entry go, the direct route comes', () => {
    const plan = planPeers(desiredPeers([A], self, net).peers, { ...programmed(), direct: [] }, 'flannel.1', net, underlay);
    expect(plan.ipFirst).toContainEqual(['route', 'del', '10.88.2.0/24', 'dev', 'flannel.1']);
    expect(plan.bridge).toContainEqual(['fdb', 'del', A.attrs.vtepMAC, 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self']);
    expect(plan.ipLast).toContainEqual(['neigh', 'del', '10.88.2.0', 'dev', 'flannel.1']);
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '192.168.88.2']);
  });

  it('direct -> VXLAN (DirectRouting off, or the peer moved off the subnet): the direct route goes first, VXLAN comes', () => {
    const actual: Actual = { ...empty, direct: [{ dst: '10.88.2.0/24', gateway: '192.168.88.2', dev: 'eth0' }] };
    const plan = planPeers(desiredPeers([A], self, net).peers, actual, 'flannel.1', net);
    expect(plan.ipFirst[0]).toEqual(['route', 'del', '10.88.2.0/24', 'via', '192.168.88.2', 'dev', 'eth0']);
    expect(plan.ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink']);
    expect(plan.bridge).toContainEqual(['fdb', 'replace', A.attrs.vtepMAC, 'dst', '192.168.88.2', 'dev', 'flannel.1', 'self', 'permanent']);
  });

  it('a direct route of a peer that left goes; a peer whose public address changed gets its new one', () => {
    const moved = lease('10.88.2.0/24', '192.168.88.7', A.attrs.vtepMAC!);
    const actual: Actual = {
      ...empty,
      direct: [
        { dst: '10.88.2.0/24', gateway: '192.168.88.2', dev: 'eth0' },
        { dst: '10.88.9.0/24', gateway: '192.168.88.9', dev: 'eth0' },
      ],
    };
    const plan = planPeers(desiredPeers([moved], self, net).peers, actual, 'flannel.1', net, underlay);
    expect(plan.ipFirst).toEqual([
      ['route', 'del', '10.88.2.0/24', 'via', '192.168.88.2', 'dev', 'eth0'],
      ['route', 'del', '10.88.9.0/24', 'via', '192.168.88.9', 'dev', 'eth0'],
    ]);
    expect(plan.ipLast).toEqual([['route', 'replace', '10.88.2.0/24', 'via', '192.168.88.7']]);
  });

  it('a route for the whole network (or wider) via a gateway is not ours: never removed', () => {
    const actual: Actual = { ...empty, direct: [{ dst: '10.88.0.0/16', gateway: '192.168.88.254', dev: 'eth0' }] };
    expect(planPeers([], actual, 'flannel.1', net, underlay).changes).toEqual([]);
  });

  it('an IPv6 underlay prefix does not make an IPv4 peer direct', () => {
    expect(planPeers(desiredPeers([A], self, net).peers, empty, 'flannel.1', net, [P('fd00::/64')]).ipLast).toContainEqual(['route', 'replace', '10.88.2.0/24', 'via', '10.88.2.0', 'dev', 'flannel.1', 'onlink']);
  });
});

describe('applying a plan', () => {
  let prev: Runner | undefined;
  afterEach(() => {
    if (prev) setRunner(prev);
  });
  it('a line the kernel refuses does not keep the other batches from running; the refusal is reported after them', async () => {
    const batches: { program: string; lines: string[] }[] = [];
    prev = setRunner(async (argv, input) => {
      const lines = (input ?? '').trim().split('\n');
      batches.push({ program: argv[0], lines });
      // the neighbour of 10.88.2.0 is refused (as the kernel would refuse a bad lladdr)
      const bad = lines.findIndex((l) => l.startsWith('neigh replace 10.88.2.0 '));
      return bad < 0 ? { stdout: '', stderr: '', code: 0 } : { stdout: '', stderr: `RTNETLINK answers: Invalid argument\nCommand failed -:${bad + 1}\n`, code: 1 };
    });
    const plan = planPeers(desiredPeers([A, B], self, net).peers, empty, 'flannel.1', net);
    const err = await applyPlan(plan).then(() => undefined, (e: unknown) => e);
    // all three batches ran: B's neighbour, both FDB entries, both routes
    expect(batches.map((b) => [b.program, b.lines.length])).toEqual([['ip', 2], ['bridge', 2], ['ip', 2]]);
    expect(err).toBeInstanceOf(PlanError);
    expect((err as PlanError).message).toBe('ip neigh replace 10.88.2.0 lladdr 0a:00:00:00:00:02 dev flannel.1 nud permanent: RTNETLINK answers: Invalid argument');
    expect([...(err as PlanError).failedChanges].map((i) => plan.changes[i])).toEqual(['neigh 10.88.2.0 → 0a:00:00:00:00:02: added']);
  });
});

describe('acquiring a lease (file store)', () => {
  let dir: string;
  let store: FileStore;
  const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan"}}');
  const attrs = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-acq-'));
    store = new FileStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('takes a free subnet of the pool, and the same one again for the same PublicIP', async () => {
    const a = await acquireLease(store, cfg, attrs(1), { ttlS: 60 });
    expect(a.how).toBe('new');
    const again = await acquireLease(store, cfg, { ...attrs(1), vtepMAC: '0a:00:00:00:00:aa' }, { ttlS: 60 });
    expect([again.how, again.subnet?.toString()]).toEqual(['reused', a.subnet?.toString()]);
    const { leases } = await store.list();
    expect(leases).toHaveLength(1);
    expect(leases[0].attrs.vtepMAC).toBe('0a:00:00:00:00:aa');
  });
  it('prefers the previous subnet.env subnet when free', async () => {
    const a = await acquireLease(store, cfg, attrs(1), { ttlS: 60, previous: { subnet: P('10.88.3.128/26') } });
    expect([a.how, a.subnet?.toString()]).toEqual(['previous', '10.88.3.128/26']);
    const b = await acquireLease(store, cfg, attrs(2), { ttlS: 60, previous: { subnet: P('10.88.3.128/26') } });
    expect(b.how).toBe('new');
    expect(b.subnet?.toString()).not.toBe('10.88.3.128/26');
  });
  it('nodes starting at once never share a subnet; a full pool is a clear error and writes nothing', async () => {
    const results = await Promise.all([1, 2, 3, 4].map((n) => acquireLease(new FileStore(dir), cfg, attrs(n), { ttlS: 60 })));
    expect(new Set(results.map((r) => r.subnet?.toString())).size).toBe(4);
    await expect(acquireLease(store, cfg, attrs(5), { ttlS: 60 })).rejects.toThrow(/no free subnet: all 4 \/26 subnets from 10.88.3.0 to 10.88.3.192/);
    expect((await store.list()).leases).toHaveLength(4);
  });
  it('the same random pick by racing nodes: the loser retries and gets another subnet', async () => {
    const alwaysFirst = () => 0;
    const [a, b] = await Promise.all([
      acquireLease(new FileStore(dir), cfg, attrs(1), { ttlS: 60, random: alwaysFirst }),
      acquireLease(new FileStore(dir), cfg, attrs(2), { ttlS: 60, random: alwaysFirst }),
    ]);
    expect(a.subnet?.toString()).not.toBe(b.subnet?.toString());
  });
  it('expired leases are free again and are removed by expire()', async () => {
    await store.create({ subnet: P('10.88.3.0/26') }, attrs(1), -1);
    expect((await store.list()).leases).toHaveLength(0);
    const a = await acquireLease(store, cfg, attrs(2), { ttlS: 60, previous: { subnet: P('10.88.3.0/26') } });
    expect(a.subnet?.toString()).toBe('10.88.3.0/26');
    await store.create({ subnet: P('10.88.3.64/26') }, attrs(3), -1);
    await store.expire();
    expect((await store.list()).leases.map((l) => l.subnet?.toString())).toEqual(['10.88.3.0/26']);
  });
  it('a reservation of ours (a lease file without "Expiration", written by hand) is adopted and stays one', async () => {
    const file = join(dir, 'subnets', '10.88.3.64-26');
    mkdirSync(join(dir, 'subnets'), { recursive: true });
    writeFileSync(file, '{"PublicIP":"192.168.88.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}}');
    const a = await acquireLease(store, cfg, attrs(1), { ttlS: 60 });
    expect([a.how, a.subnet?.toString(), a.permanent]).toEqual(['reused', '10.88.3.64/26', true]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ PublicIP: '192.168.88.1', BackendType: 'vxlan', BackendData: { VNI: 1, VtepMAC: '0a:00:00:00:00:01' } });
    expect((await store.list()).leases[0].permanent).toBe(true);
  });
  it('renew is guarded by the value we last saw', async () => {
    const s = { subnet: P('10.88.3.0/26') };
    await store.create(s, attrs(1), 60);
    expect(await store.renew(s, attrs(1), 60, encodeAttrs(attrs(2)))).toBe(false);
    expect(await store.renew(s, attrs(1), 60, encodeAttrs(attrs(1)))).toBe(true);
  });
  it('the watch reports a change within the poll interval', async () => {
    const seen: string[] = [];
    const stop = store.watch((why) => seen.push(why), (err) => seen.push(`error ${err.message}`));
    await store.create({ subnet: P('10.88.3.0/26') }, attrs(1), 60);
    await new Promise((r) => setTimeout(r, 800));
    stop();
    expect(seen.length).toBeGreaterThan(0);
  });
  it('a watch started from a list\'s revision reports a change made between that list and the watch', async () => {
    await store.create({ subnet: P('10.88.3.0/26') }, attrs(1), 60);
    const { revision } = await store.list();
    expect(revision).toBeDefined();
    await store.create({ subnet: P('10.88.3.64/26') }, attrs(2), 60); // after the list, before the watch
    const seen: string[] = [];
    const stop = store.watch((why) => seen.push(why), (err) => seen.push(`error ${err.message}`), revision);
    await new Promise((r) => setTimeout(r, 800));
    stop();
    expect(seen).toEqual(['lease directory changed']);
  });
  it('pickFree in a huge pool still finds the one free subnet', () => {
    const big = parseNetworkConfig('{"Network":"10.0.0.0/8","SubnetLen":30,"Backend":{"Type":"vxlan"}}');
    const leases: Lease[] = [{ subnet: P('10.0.0.0/9'), attrs: attrs(1) }];
    const s = pickFree(big.v4!, leases)!;
    expect(P('10.128.0.0/9').contains(s.network)).toBe(true);
  });
});

describe('IPv6 peers on flannel-v6.<VNI>', () => {
  const net6 = P('fd88:0:1::/48');
  const self6 = { subnet: P('fd88:0:1:1::/64'), publicIP: IP.parse('fd88:88::1')!, vni: 1 };
  const dual = (n: number, extra: Partial<LeaseAttrs> = {}): Lease => ({
    subnet: P(`10.88.${n}.0/24`),
    ipv6Subnet: P(`fd88:0:1:${n}::/64`),
    attrs: {
      publicIP: IP.parse(`192.168.88.${n}`)!,
      publicIPv6: IP.parse(`fd88:88::${n}`)!,
      backendType: 'vxlan',
      vni: 1,
      vtepMAC: `0a:00:00:00:04:0${n}`,
      v6Vni: 1,
      v6VtepMAC: `0a:00:00:00:06:0${n}`,
      ...extra,
    },
  });
  const programmed6 = (mac = '0a:00:00:00:06:02', ip = 'fd88:88::2'): Actual => ({
    neigh: [{ dst: 'fd88:0:1:2::', lladdr: mac, state: ['PERMANENT'] }],
    fdb: [{ mac, dst: ip, flags: ['self'], state: 'permanent' }],
    // the kernel's route to our own VTEP address (/128, proto kernel) and the link-local one are not peers
    routes: [
      { dst: 'fd88:0:1:1::', protocol: 'kernel', flags: [] },
      { dst: 'fd88:0:1:2::/64', gateway: 'fd88:0:1:2::', flags: ['onlink'] },
      { dst: 'fe80::/64', protocol: 'kernel', flags: [] },
    ],
  });

  it('uses the IPv6 subnet, BackendV6Data and PublicIPv6; skips leases without them, saying why', () => {
    const { peers, skipped } = desiredPeers(
      [
        { ...dual(1), attrs: { ...dual(1).attrs } }, // ours (same IPv6 subnet)
        dual(2),
        { subnet: P('10.88.3.0/24'), attrs: dual(3).attrs }, // an IPv4-only node
        dual(4, { v6VtepMAC: undefined }),
        dual(5, { publicIPv6: undefined }),
        dual(6, { v6Vni: 7 }),
        dual(7, { publicIPv6: IP.parse('fd88:88::1')! }),
      ],
      self6,
      net6,
    );
    expect(peers).toEqual([{ subnet: P('fd88:0:1:2::/64'), key: 'fd88:0:1:2::/64', vtepIP: 'fd88:0:1:2::', mac: '0a:00:00:00:06:02', publicIP: 'fd88:88::2' }]);
    expect(skipped).toEqual([
      'lease 10.88.3.0/24: no IPv6 subnet (its node is not reachable over IPv6)',
      'lease 10.88.4.0/24 + fd88:0:1:4::/64: no BackendV6Data.VtepMAC',
      'lease 10.88.5.0/24 + fd88:0:1:5::/64: no PublicIPv6',
      'lease 10.88.6.0/24 + fd88:0:1:6::/64: BackendV6Data.VNI 7 is not ours (1)',
      'lease 10.88.7.0/24 + fd88:0:1:7::/64: PublicIPv6 fd88:88::1 is this node\'s (a stale lease of ours?)',
    ]);
  });
  it('the IPv4 side of the same dual-stack leases uses BackendData and PublicIP', () => {
    const { peers } = desiredPeers([dual(1), dual(2)], { subnet: P('10.88.1.0/24'), publicIP: IP.parse('192.168.88.1')!, vni: 1 }, net);
    expect(peers).toEqual([{ subnet: P('10.88.2.0/24'), key: '10.88.2.0/24', vtepIP: '10.88.2.0', mac: '0a:00:00:00:04:02', publicIP: '192.168.88.2' }]);
  });
  it('a new peer: neighbour, FDB (dst = PublicIPv6), route via its subnet address onlink', () => {
    const plan = planPeers(desiredPeers([dual(2)], self6, net6).peers, { neigh: [], fdb: [], routes: [] }, 'flannel-v6.1', net6);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', 'fd88:0:1:2::', 'lladdr', '0a:00:00:00:06:02', 'dev', 'flannel-v6.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([['fdb', 'replace', '0a:00:00:00:06:02', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self', 'permanent']]);
    expect(plan.ipLast).toEqual([['route', 'replace', 'fd88:0:1:2::/64', 'via', 'fd88:0:1:2::', 'dev', 'flannel-v6.1', 'onlink']]);
  });
  it('nothing to do when the kernel matches, whatever spelling it prints addresses in; kernel routes are left alone', () => {
    const actual = programmed6();
    actual.neigh[0].dst = 'FD88:0000:1:2:0:0:0:0';
    actual.fdb[0].dst = 'fd88:88:0:0:0:0:0:2';
    expect(planPeers(desiredPeers([dual(2)], self6, net6).peers, actual, 'flannel-v6.1', net6).changes).toEqual([]);
  });
  it('a removed peer: its route, FDB entry and neighbour go', () => {
    const plan = planPeers([], programmed6(), 'flannel-v6.1', net6);
    expect(plan.ipFirst).toEqual([['route', 'del', 'fd88:0:1:2::/64', 'dev', 'flannel-v6.1']]);
    expect(plan.bridge).toEqual([['fdb', 'del', '0a:00:00:00:06:02', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self']]);
    expect(plan.ipLast).toEqual([['neigh', 'del', 'fd88:0:1:2::', 'dev', 'flannel-v6.1']]);
  });
  it('a peer\'s IPv6 VTEP MAC changed: neighbour replaced, new FDB entry, the stale one removed', () => {
    const plan = planPeers(desiredPeers([dual(2, { v6VtepMAC: '0a:00:00:00:06:99' })], self6, net6).peers, programmed6(), 'flannel-v6.1', net6);
    expect(plan.ipFirst).toEqual([['neigh', 'replace', 'fd88:0:1:2::', 'lladdr', '0a:00:00:00:06:99', 'dev', 'flannel-v6.1', 'nud', 'permanent']]);
    expect(plan.bridge).toEqual([
      ['fdb', 'replace', '0a:00:00:00:06:99', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self', 'permanent'],
      ['fdb', 'del', '0a:00:00:00:06:02', 'dst', 'fd88:88::2', 'dev', 'flannel-v6.1', 'self'],
    ]);
    expect(plan.ipLast).toEqual([]);
  });
});

describe('acquiring dual-stack and IPv6-only leases (file store)', () => {
  let dir: string;
  let store: FileStore;
  const dualCfg = parseNetworkConfig(
    '{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","EnableIPv6":true,"IPv6Network":"fd88::/60","Backend":{"Type":"vxlan"}}',
  );
  const v6Cfg = parseNetworkConfig('{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd88::/62","Backend":{"Type":"vxlan"}}');
  const attrs6 = (n: number, v4 = true): LeaseAttrs => ({
    ...(v4 ? { publicIP: IP.parse(`192.168.88.${n}`)!, vni: 1, vtepMAC: `0a:00:00:00:04:0${n}` } : {}),
    publicIPv6: IP.parse(`fd88:88::${n}`)!,
    backendType: 'vxlan',
    v6Vni: 1,
    v6VtepMAC: `0a:00:00:00:06:0${n}`,
  });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-acq6-'));
    store = new FileStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('a dual-stack lease holds one subnet of each family, in a file named as flannel\'s etcd key', async () => {
    const a = await acquireLease(store, dualCfg, attrs6(1), { ttlS: 60 });
    expect(a.how).toBe('new');
    expect(P('10.88.3.0/24').contains(a.subnet!.network) && a.subnet!.length === 26).toBe(true);
    expect(P('fd88::/60').contains(a.ipv6Subnet!.network) && a.ipv6Subnet!.length === 64).toBe(true);
    const file = join(dir, 'subnets', `${a.subnet!.network}-26&${a.ipv6Subnet!.network}-64`);
    const json = JSON.parse(readFileSync(file, 'utf8'));
    expect(Object.keys(json)).toEqual(['PublicIP', 'PublicIPv6', 'BackendType', 'BackendData', 'BackendV6Data', 'Expiration']);
    const again = await acquireLease(store, dualCfg, attrs6(1), { ttlS: 60 });
    expect([again.how, again.subnet?.toString(), again.ipv6Subnet?.toString()]).toEqual(['reused', a.subnet?.toString(), a.ipv6Subnet?.toString()]);
  });
  it('nodes starting at once never share a subnet of either family; the IPv6 pool can be the one that runs out', async () => {
    // fd88::/60 skips its first /64: 15 IPv6 subnets, 4 IPv4 ones
    const results = await Promise.all([1, 2, 3, 4].map((n) => acquireLease(new FileStore(dir), dualCfg, attrs6(n), { ttlS: 60, random: () => 0 })));
    expect(new Set(results.map((r) => r.subnet?.toString())).size).toBe(4);
    expect(new Set(results.map((r) => r.ipv6Subnet?.toString())).size).toBe(4);
    const small = parseNetworkConfig('{"Network":"10.88.0.0/16","EnableIPv6":true,"IPv6Network":"fd88::/62","IPv6SubnetMin":"fd88:0:0:3::","Backend":{"Type":"vxlan"}}');
    const other = new FileStore(join(dir, 'small'));
    await acquireLease(other, small, attrs6(5), { ttlS: 60 });
    await expect(acquireLease(other, small, attrs6(6), { ttlS: 60 })).rejects.toThrow(/no free subnet: all 1 \/64 subnets from fd88:0:0:3:: to fd88:0:0:3:: of fd88::\/62/);
  });
  it('create fails when another key already holds the IPv6 half (same IPv6 subnet, other IPv4 subnet)', async () => {
    expect(await store.create({ subnet: P('10.88.3.0/26'), ipv6Subnet: P('fd88:0:0:1::/64') }, attrs6(1), 60)).toBe(true);
    expect(await store.create({ subnet: P('10.88.3.64/26'), ipv6Subnet: P('fd88:0:0:1::/64') }, attrs6(2), 60)).toBe(false);
    expect(await store.create({ subnet: P('10.88.3.0/26'), ipv6Subnet: P('fd88:0:0:2::/64') }, attrs6(2), 60)).toBe(false);
    expect(await store.create({ ipv6Subnet: P('fd88:0:0:1::/64') }, attrs6(2, false), 60)).toBe(false);
    expect(await store.create({ subnet: P('10.88.3.64/26'), ipv6Subnet: P('fd88:0:0:2::/64') }, attrs6(2), 60)).toBe(true);
  });
  it('IPv6 only: keyed by the IPv6 subnet, found again by PublicIPv6, the previous subnet.env subnet preferred', async () => {
    const a = await acquireLease(store, v6Cfg, attrs6(1, false), { ttlS: 60, previous: { ipv6Subnet: P('fd88:0:0:2::/64') } });
    expect([a.how, a.subnet, a.ipv6Subnet?.toString()]).toEqual(['previous', undefined, 'fd88:0:0:2::/64']);
    expect(readdirSync(join(dir, 'subnets'))).toEqual(['fd88:0:0:2::-64']);
    expect(JSON.parse(readFileSync(join(dir, 'subnets', 'fd88:0:0:2::-64'), 'utf8')).PublicIP).toBe('0.0.0.0');
    const again = await acquireLease(store, v6Cfg, { ...attrs6(1, false), v6VtepMAC: '0a:00:00:00:06:aa' }, { ttlS: 60 });
    expect([again.how, again.ipv6Subnet?.toString()]).toEqual(['reused', 'fd88:0:0:2::/64']);
    // another IPv6-only node (PublicIP "0.0.0.0" too) is not mistaken for us
    const b = await acquireLease(store, v6Cfg, attrs6(2, false), { ttlS: 60 });
    expect(b.how).toBe('new');
    expect(b.ipv6Subnet?.toString()).not.toBe('fd88:0:0:2::/64');
  });
  it('an IPv4 overlay gaining IPv6: our IPv4-only lease is replaced by a dual-stack one with the same IPv4 subnet', async () => {
    const v4Cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan"}}');
    const { publicIP, vni, vtepMAC } = attrs6(1);
    const a = await acquireLease(store, v4Cfg, { publicIP, vni, vtepMAC, backendType: 'vxlan' }, { ttlS: 60 });
    const logs: string[] = [];
    const b = await acquireLease(store, dualCfg, attrs6(1), { ttlS: 60, log: (m) => logs.push(m) });
    expect(b.subnet?.toString()).toBe(a.subnet?.toString());
    expect(b.ipv6Subnet).toBeDefined();
    expect(readdirSync(join(dir, 'subnets'))).toEqual([`${a.subnet!.network}-26&${b.ipv6Subnet!.network}-64`]);
    expect(logs.join('\n')).toMatch(/does not fit the network config: replacing it/);
  });
});
