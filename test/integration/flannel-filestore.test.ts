// vxlan-flannel with the embedded lease store (a shared directory, no etcd):
// the same topology as the etcd suite, plus lease files written by hand,
// expiry and renewal, restarts, and what a bad config or a full pool does.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DaemonHandle, Host, NETWORK, Pod, Topology, sleep, waitFor, printDaemonLogsOnFailure } from './flannel-topology';

let topo: Topology;
let leaseDir: string;
let store: string[];
let n1: Host, n2: Host, n3: Host;
let d1: DaemonHandle, d2: DaemonHandle, d3: DaemonHandle;
let s1: { subnet: string; vtepIP: string }, s2: { subnet: string; vtepIP: string }, s3: { subnet: string; vtepIP: string };
let p1: Pod, p2: Pod;

const leaseFile = (subnet: string) => join(leaseDir, 'subnets', subnet.replace('/', '-'));
const vtepMac = (node: Host) => topo.json(node.ns, 'link show dev flannel.1')[0].address as string;
const programmed = (on: Host, subnet: string, mac: string, ip: string) => {
  const st = topo.peerState(on.ns, subnet, mac, ip);
  return st.neigh && st.fdb && st.route;
};
const gone = (on: Host, subnet: string, mac: string, ip: string) => {
  const st = topo.peerState(on.ns, subnet, mac, ip);
  return !st.neigh && !st.fdb && !st.route;
};

beforeAll(async () => {
  topo = new Topology('flf');
  leaseDir = join(topo.tmp.path, 'leases');
  store = ['--lease-dir', leaseDir];
  n1 = topo.addHost('n1', 1);
  n2 = topo.addHost('n2', 2);
  n3 = topo.addHost('n3', 3);
  // Nodes pick random subnets from 10.88.1.0-10.88.99.0 only: the leases these tests write by hand
  // for made-up peers (10.88.200.0 and up) can never collide with a node's own.
  const set = await topo.cli(n1, ['network', 'set', '--network', NETWORK, '--subnet-len', '24', '--subnet-max', '10.88.99.0', ...store]);
  expect(set.code, set.stderr).toBe(0);
  d1 = topo.startDaemon(n1, store, ['--lease-ttl', '10']);
  d2 = topo.startDaemon(n2, store);
  [s1, s2] = await Promise.all([topo.waitSubnet(d1), topo.waitSubnet(d2)]);
  await topo.waitMesh([{ node: n1, subnet: s1.subnet }, { node: n2, subnet: s2.subnet }]);
}, 60_000);

printDaemonLogsOnFailure(() => ({ d1, d2 }));

afterAll(async () => {
  await topo?.cleanup();
});

describe('vxlan-flannel with the embedded file store', () => {
  it('leases are files in flannel\'s JSON with an expiry; subnet.env is flannel\'s', () => {
    expect(s1.subnet).not.toBe(s2.subnet);
    const lease = JSON.parse(readFileSync(leaseFile(s2.subnet), 'utf8'));
    expect(Object.keys(lease)).toEqual(['PublicIP', 'BackendType', 'BackendData', 'Expiration']);
    expect(lease).toMatchObject({ PublicIP: n2.ip, BackendType: 'vxlan', BackendData: { VNI: 1, VtepMAC: vtepMac(n2) } });
    const left = Date.parse(lease.Expiration) - Date.now();
    expect(left).toBeGreaterThan(86_000_000);
    expect(readFileSync(topo.subnetFile(n2), 'utf8')).toBe(
      `FLANNEL_NETWORK=${NETWORK}\nFLANNEL_SUBNET=${s2.vtepIP.replace(/\.0$/, '.1')}/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n`,
    );
  });

  it('pods on two nodes reach each other, with packets at the MTU', async () => {
    p1 = await topo.addPod(n1);
    p2 = await topo.addPod(n2);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    expect(await topo.ping(p2, p1.ip)).toBe(true);
    expect(await topo.ping(p1, p2.ip, { size: 1450 - 28, dontFragment: true })).toBe(true);
    expect(await topo.ping(p2, p1.ip, { size: 1450 - 28, dontFragment: true })).toBe(true);
  });

  it('a short lease is renewed before it expires', async () => {
    const before = Date.parse(JSON.parse(readFileSync(leaseFile(s1.subnet), 'utf8')).Expiration);
    await waitFor('d1 to renew its 10 s lease', () => Date.parse(JSON.parse(readFileSync(leaseFile(s1.subnet), 'utf8')).Expiration) > before, 12_000, 200);
    expect(Date.now()).toBeLessThan(before); // renewed while still valid
    expect(d1.log()).toMatch(/renewed lease/);
  });

  it('a node joining later is programmed within 2 s and reachable without any ADD', async () => {
    d3 = topo.startDaemon(n3, store, ['--release-on-exit']);
    const { value: file } = await waitFor('n3\'s lease file', () => readdirSync(join(leaseDir, 'subnets')).find((f) => !f.startsWith('.') && ![s1.subnet, s2.subnet].includes(f.replace('-', '/'))), 20_000, 20);
    const t0 = Date.now();
    s3 = await topo.waitSubnet(d3);
    const mac3 = JSON.parse(readFileSync(join(leaseDir, 'subnets', file!), 'utf8')).BackendData.VtepMAC;
    await waitFor('n1 and n2 to program n3', () => programmed(n1, s3.subnet, mac3, n3.ip) && programmed(n2, s3.subnet, mac3, n3.ip), 5000, 20);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(await topo.ping(p1, s3.vtepIP)).toBe(true);
    expect(await topo.ping(p2, s3.vtepIP)).toBe(true);
  });

  it('a lease file written by hand in flannel\'s JSON is programmed; its removal unprograms it', async () => {
    const mac = '0a:58:0a:58:c8:07';
    writeFileSync(leaseFile('10.88.201.0/24'), `{"PublicIP":"192.168.88.7","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${mac}"}}`);
    await waitFor('n1 to program the hand-written lease', () => programmed(n1, '10.88.201.0/24', mac, '192.168.88.7'), 5000, 20);
    unlinkSync(leaseFile('10.88.201.0/24'));
    await waitFor('n1 to drop it', () => gone(n1, '10.88.201.0/24', mac, '192.168.88.7'), 3000, 20);
  });

  it('an expired lease is not programmed and is deleted', async () => {
    const mac = '0a:58:0a:58:c8:08';
    const file = leaseFile('10.88.202.0/24');
    // Long enough to be seen before it expires even when CI is slow (a lease seen only after expiry is never programmed).
    const soon = new Date(Date.now() + 4000).toISOString();
    writeFileSync(file, `{"PublicIP":"192.168.88.8","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${mac}"},"Expiration":"${soon}"}`);
    await waitFor('n1 to program the short lease', () => programmed(n1, '10.88.202.0/24', mac, '192.168.88.8'), 3500, 20);
    await waitFor('the lease to expire and be removed everywhere', () => !existsSync(file) && gone(n1, '10.88.202.0/24', mac, '192.168.88.8') && gone(n2, '10.88.202.0/24', mac, '192.168.88.8'), 9000, 50);
  });

  it('a restarted daemon keeps its subnet and VTEP MAC; traffic never needs a new ADD', async () => {
    const mac = vtepMac(n2);
    expect(await topo.stopDaemon(d2)).toBe(0);
    expect(existsSync(leaseFile(s2.subnet))).toBe(true); // kept for the restart
    d2 = topo.startDaemon(n2, store);
    await waitFor('d2 to run again', () => /running:/.test(d2.log().split('SIGTERM').at(-1)!), 20_000);
    expect((await topo.waitSubnet(d2)).subnet).toBe(s2.subnet);
    expect(vtepMac(n2)).toBe(mac);
    expect(d2.log()).toMatch(/reusing VTEP flannel.1/);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
  });

  it('a node leaving is cleaned from the others', async () => {
    const mac3 = vtepMac(n3);
    expect(await topo.stopDaemon(d3)).toBe(0);
    expect(existsSync(leaseFile(s3.subnet))).toBe(false);
    const t0 = Date.now();
    await waitFor('n1 and n2 to forget n3', () => gone(n1, s3.subnet, mac3, n3.ip) && gone(n2, s3.subnet, mac3, n3.ip), 5000, 20);
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('VTEPs of an earlier network config (another VNI, IPv6 since switched off) and their routes are removed at start', async () => {
    const n5 = topo.addHost('n5', 5);
    topo.ip(n5.ns, `link add flannel.7 type vxlan id 7 local ${n5.ip} dev eth0 dstport 8472 nolearning`);
    topo.ip(n5.ns, 'link set flannel.7 up');
    topo.ip(n5.ns, 'route add 10.88.240.0/24 via 10.88.240.0 dev flannel.7 onlink');
    topo.ip(n5.ns, `link add flannel-v6.1 type vxlan id 1 local ${n5.ip6} dev eth0 dstport 8472 nolearning`);
    topo.ip(n5.ns, 'link add flannel.99 type bridge'); // named like ours, but no VTEP: not ours to remove
    const d5 = topo.startDaemon(n5, store, ['--release-on-exit']);
    try {
      await waitFor('d5 to run', () => /running:/.test(d5.log()), 20_000);
      expect(topo.json(n5.ns, 'link show type vxlan').map((l: any) => l.ifname)).toEqual(['flannel.1']);
      expect(topo.json(n5.ns, 'link show').map((l: any) => l.ifname)).toContain('flannel.99');
      expect(topo.json(n5.ns, 'route show 10.88.240.0/24')).toEqual([]);
      expect(d5.log()).toMatch(/removed flannel.7 \(VNI 7\), a VTEP of an earlier network config/);
      expect(d5.log()).toMatch(/removed flannel-v6.1 \(VNI 1\)/);
    } finally {
      expect(await topo.stopDaemon(d5)).toBe(0);
    }
  });

  it('bad network config, then a full pool: clear log lines and nothing programmed; fixed config: it starts', async () => {
    const n4 = topo.addHost('n4', 4);
    const dir = join(topo.tmp.path, 'leases-bad');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'config'), '{"Network":"10.77.0.1/16","Backend":{"Type":"vxlan"}}');
    const d4 = topo.startDaemon(n4, ['--lease-dir', dir]);
    await waitFor('the bad config to be reported', () => /bad network config .*host bits set.*retrying/.test(d4.log()), 10_000);
    // a pool of one subnet, already leased by another node
    writeFileSync(join(dir, 'config'), '{"Network":"10.77.0.0/16","SubnetMin":"10.77.5.0","SubnetMax":"10.77.5.0","Backend":{"Type":"vxlan"}}');
    mkdirSync(join(dir, 'subnets'), { recursive: true });
    writeFileSync(join(dir, 'subnets', '10.77.5.0-24'), '{"PublicIP":"192.168.88.99","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:00:00:00:00:99"}}');
    await waitFor('the full pool to be reported', () => /no free subnet: all 1 \/24 subnets from 10.77.5.0 to 10.77.5.0/.test(d4.log()), 15_000, 100);
    expect(topo.json(n4.ns, 'link show type vxlan')).toEqual([]);
    expect(existsSync(topo.subnetFile(n4))).toBe(false);
    expect(readdirSync(join(dir, 'subnets'))).toEqual(['10.77.5.0-24']);
    // the other node leaves: d4 gets the subnet on its next try
    unlinkSync(join(dir, 'subnets', '10.77.5.0-24'));
    const s4 = await topo.waitSubnet(d4, 20_000);
    expect(s4.subnet).toBe('10.77.5.0/24');
    expect(await topo.stopDaemon(d4)).toBe(0);
    await sleep(0);
  }, 90_000);
});
