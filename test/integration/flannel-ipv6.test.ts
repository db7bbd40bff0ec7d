// vxlan-flannel with IPv6: a dual-stack overlay (IPv4 on flannel.1 over the
// IPv4 underlay, IPv6 on flannel-v6.1 over the IPv6 underlay, as flanneld
// does) with the embedded file store, then an IPv6-only overlay, then a
// dual-stack one in etcd. Node namespaces have both underlay addresses
// (192.168.88.x and fd88:88::x); pods are attached through the plugin with a
// CNI config, as a runtime would.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DaemonHandle, Host, Pod, Topology, sleep } from './flannel-topology';
import { waitFor, waitAndReport } from '../support/wait';
import { sh } from './helpers';

const NET4 = '10.86.0.0/16';
const NET6 = 'fd86::/48';
const NET6_ONLY = 'fd87::/56';
const MTU6 = 1500 - 70; // the IPv6 VTEP's, and the pods' (the smaller of the two VTEPs')
const PING6_MAX = MTU6 - 40 - 8; // IPv6 header, ICMPv6 header
const PING4_MAX = MTU6 - 20 - 8;

type Subnets = { subnet: string; vtepIP: string; subnet6: string; vtepIP6: string; env: string };
let topo: Topology;
let leaseDir: string;
let store: string[];
let n1: Host, n2: Host;
let d1: DaemonHandle, d2: DaemonHandle;
let s1: Subnets, s2: Subnets;
let p1: Pod, p2: Pod;

const mac = (node: Host, dev = 'flannel-v6.1') => topo.json(node.ns, `link show dev ${dev}`)[0].address as string;
const leaseName = (s: Subnets) => `${s.vtepIP}-24&${s.vtepIP6}-64`;
const programmed = (on: Host, subnet: string, m: string, ip: string) => {
  const st = topo.peerState(on.ns, subnet, m, ip);
  return st.neigh && st.fdb && st.route && st.staleFdb.length === 0;
};
const gone = (on: Host, subnet: string, m: string, ip: string) => {
  const st = topo.peerState(on.ns, subnet, m, ip);
  return !st.neigh && !st.fdb && !st.route;
};
/**
 * The bridge plugin puts the IPv6 gateway on cni0 without DAD, so it is usable
 * at once; the tests still check it is not tentative before pinging through it.
 */
const gatewayReady = (node: Host) =>
  waitFor(`${node.name}'s cni0 IPv6 gateway to finish DAD`, () => {
    const addrs = topo.json(node.ns, '-6 addr show dev cni0 scope global')[0]?.addr_info ?? [];
    return addrs.length > 0 && addrs.every((a: any) => !a.tentative);
  }, 30_000, 50);
const forwarding6 = (node: Host) => sh(['nsenter', `--net=${node.path}`, '--', 'cat', '/proc/sys/net/ipv6/conf/all/forwarding']).trim();

beforeAll(async () => {
  topo = new Topology('fl6');
  leaseDir = join(topo.tmp.path, 'leases');
  store = ['--lease-dir', leaseDir];
  // IPv6 forwarding left off: the daemon must turn it on
  n1 = topo.addHost('n1', 1, 1500, { ipv6Forwarding: false });
  n2 = topo.addHost('n2', 2, 1500, { ipv6Forwarding: false });
  // Nodes pick random subnets below 10.86.100.0 and fd86:0:0:64::: the leases written by hand
  // for made-up peers (10.86.200.0, fd86:0:0:c8::) can never collide with a node's own.
  const set = await topo.cli(n1, ['network', 'set', '--network', NET4, '--subnet-max', '10.86.99.0', '--ipv6-network', NET6, '--ipv6-subnet-max', 'fd86:0:0:63::', ...store]);
  expect(set.code, set.stderr).toBe(0);
  expect(set.stdout.trim()).toBe(
    `{"Network":"${NET4}","SubnetMax":"10.86.99.0","EnableIPv6":true,"IPv6Network":"${NET6}","IPv6SubnetMax":"fd86:0:0:63::","Backend":{"Type":"vxlan"}}`,
  );
  d1 = topo.startDaemon(n1, store); // PublicIPv6 from --iface eth0
  d2 = topo.startDaemon(n2, store, ['--public-ipv6', n2.ip6]);
  [s1, s2] = await Promise.all([topo.waitSubnet(d1), topo.waitSubnet(d2)]);
  await topo.waitMesh([{ node: n1, subnet: s1.subnet }, { node: n2, subnet: s2.subnet }]);
  await topo.waitMesh([{ node: n1, subnet: s1.subnet6 }, { node: n2, subnet: s2.subnet6 }], 10_000, 'flannel-v6.1');
}, 60_000);

afterAll(async () => {
  await topo?.cleanup();
});

describe('vxlan-flannel dual stack (embedded file store)', () => {
  it('leases are flannel\'s dual-stack keys and JSON; subnet.env has the IPv6 keys; IPv6 forwarding is on', () => {
    expect(s1.subnet6).toMatch(/^fd86:0:0:[0-9a-f]{1,4}::\/64$/);
    expect(s1.subnet6).not.toBe(s2.subnet6);
    expect(readdirSync(join(leaseDir, 'subnets')).sort()).toEqual([leaseName(s1), leaseName(s2)].sort());
    const text = readFileSync(join(leaseDir, 'subnets', leaseName(s2)), 'utf8');
    const { Expiration, ...attrs } = JSON.parse(text);
    expect(Date.parse(Expiration)).toBeGreaterThan(Date.now());
    expect(JSON.stringify(attrs)).toBe(
      `{"PublicIP":"${n2.ip}","PublicIPv6":"${n2.ip6}","BackendType":"vxlan",` +
        `"BackendData":{"VNI":1,"VtepMAC":"${mac(n2, 'flannel.1')}"},"BackendV6Data":{"VNI":1,"VtepMAC":"${mac(n2)}"}}`,
    );
    expect(s2.env).toBe(
      `FLANNEL_NETWORK=${NET4}\nFLANNEL_SUBNET=${s2.vtepIP.replace(/\.0$/, '.1')}/24\n` +
        `FLANNEL_IPV6_NETWORK=${NET6}\nFLANNEL_IPV6_SUBNET=${s2.vtepIP6}1/64\nFLANNEL_MTU=${MTU6}\nFLANNEL_IPMASQ=false\n`,
    );
    expect(forwarding6(n1)).toBe('1');
    expect(forwarding6(n2)).toBe('1');
  });

  it('flannel-v6.1 is flanneld\'s IPv6 VTEP: nolearning, port 8472, local = PublicIPv6, dev eth0, MTU underlay − 70, the subnet address /128', () => {
    const [v6] = topo.json(n1.ns, '-d addr show dev flannel-v6.1');
    expect(v6.linkinfo.info_data).toMatchObject({ id: 1, local6: n1.ip6, link: 'eth0', port: 8472, learning: false });
    expect(v6.mtu).toBe(MTU6);
    expect(v6.flags).toContain('UP');
    expect(v6.addr_info.filter((a: any) => a.family === 'inet6' && a.scope === 'global')).toMatchObject([{ local: s1.vtepIP6, prefixlen: 128 }]);
    const [v4] = topo.json(n1.ns, '-d addr show dev flannel.1');
    expect(v4.linkinfo.info_data).toMatchObject({ id: 1, local: n1.ip, link: 'eth0', port: 8472, learning: false });
    expect(v4.mtu).toBe(1450);
    expect(v4.address).not.toBe(v6.address);
    expect(topo.peerState(n1.ns, s2.subnet6, mac(n2), n2.ip6)).toEqual({ neigh: true, fdb: true, route: true, staleFdb: [] });
  });

  it('pods get an address of each family and reach each other over IPv4 and IPv6, DF pings at the MTU too', async () => {
    p1 = await topo.addPod(n1);
    p2 = await topo.addPod(n2);
    await Promise.all([gatewayReady(n1), gatewayReady(n2)]);
    expect(p1.ip.startsWith(s1.vtepIP.replace(/0$/, ''))).toBe(true);
    expect(p2.ip6!.startsWith(s2.vtepIP6)).toBe(true);
    expect(topo.json(p1.ns, 'link show dev eth0')[0].mtu).toBe(MTU6);
    const pings = await Promise.all([
      topo.ping(p1, p2.ip),
      topo.ping(p2, p1.ip),
      topo.ping(p1, p2.ip6!),
      topo.ping(p2, p1.ip6!),
    ]);
    expect(pings).toEqual([true, true, true, true]);
    expect(await topo.ping(p1, p2.ip6!, { size: PING6_MAX, dontFragment: true })).toBe(true);
    expect(await topo.ping(p2, p1.ip6!, { size: PING6_MAX, dontFragment: true })).toBe(true);
    expect(await topo.ping(p1, p2.ip, { size: PING4_MAX, dontFragment: true })).toBe(true);
    expect(await topo.ping(p1, p2.ip6!, { size: PING6_MAX + 1, dontFragment: true, timeoutS: 1, attempts: 1 })).toBe(false);
  });

  it('CHECK and STATUS through the plugin; `status` shows IPv4 and IPv6 peers in place', async () => {
    const env = { CNI_CONTAINERID: p1.id, CNI_NETNS: p1.path, CNI_IFNAME: 'eth0' };
    const check = await topo.plugin(n1, 'CHECK', { ...topo.cniConfig(n1), prevResult: p1.result }, env);
    expect(check.code, check.stdout + check.stderr).toBe(0);
    const status = await topo.plugin(n1, 'STATUS', { ...topo.cniConfig(n1), cniVersion: '1.1.0' });
    expect(status.code, status.stdout).toBe(0);
    const st = await topo.cli(n1, ['status', '--json', '--subnet-file', topo.subnetFile(n1), ...store]);
    expect(st.code, st.stdout + st.stderr).toBe(0);
    expect(st.json.lease).toMatchObject({ subnet: s1.subnet, ipv6Subnet: s1.subnet6, publicIPv6: n1.ip6, v6VtepMAC: mac(n1), inStore: true });
    expect(st.json.vtep6).toMatchObject({ name: 'flannel-v6.1', present: true, up: true, mtu: MTU6, address: true });
    expect(st.json.peers).toEqual([{ subnet: s2.subnet, publicIP: n2.ip, vtepMAC: mac(n2, 'flannel.1'), neigh: true, fdb: true, route: true }]);
    expect(st.json.ipv6Peers).toEqual([{ subnet: s2.subnet6, publicIP: n2.ip6, vtepMAC: mac(n2), neigh: true, fdb: true, route: true }]);
    expect(st.json.problems).toEqual([]);
  });

  it('a lease written by hand as a flanneld dual-stack node writes it is programmed and reachable over IPv6; MAC change, drift, removal', async () => {
    // "n9" plays a flanneld node: its IPv6 VTEP and its way back to n1 made by hand
    const n9 = topo.addHost('n9', 9);
    const mac9 = '0a:58:0a:56:c8:09';
    const sub9 = 'fd86:0:0:c8::/64';
    const vtep9 = (m6: string) => {
      topo.ip(n9.ns, `link add flannel-v6.1 address ${m6} mtu ${MTU6} type vxlan id 1 local ${n9.ip6} dev eth0 dstport 8472 nolearning`);
      topo.ip(n9.ns, 'addr add fd86:0:0:c8::/128 dev flannel-v6.1 nodad');
      topo.ip(n9.ns, 'link set flannel-v6.1 up');
      topo.ip(n9.ns, `neigh replace ${s1.vtepIP6} lladdr ${mac(n1)} dev flannel-v6.1 nud permanent`);
      sh(['bridge', '-n', n9.ns, 'fdb', 'replace', mac(n1), 'dst', n1.ip6, 'dev', 'flannel-v6.1', 'self', 'permanent']);
      topo.ip(n9.ns, `route replace ${s1.subnet6} via ${s1.vtepIP6} dev flannel-v6.1 onlink`);
    };
    const file = join(leaseDir, 'subnets', '10.86.200.0-24&fd86:0:0:c8::-64');
    const lease = (m6: string) =>
      `{"PublicIP":"${n9.ip}","PublicIPv6":"${n9.ip6}","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${mac9}"},"BackendV6Data":{"VNI":1,"VtepMAC":"${m6}"}}`;
    try {
      let mac9v6 = '0a:58:0a:56:c8:69';
      vtep9(mac9v6);
      writeFileSync(file, lease(mac9v6));
      await waitAndReport('n1 and n2 to program n9 over IPv6 and IPv4', () =>
        programmed(n1, sub9, mac9v6, n9.ip6) && programmed(n2, sub9, mac9v6, n9.ip6) && programmed(n1, '10.86.200.0/24', mac9, n9.ip), 30_000, 20);
      expect(await topo.ping(p1, 'fd86:0:0:c8::')).toBe(true);

      // n9's flanneld restarts with a new IPv6 VTEP (new MAC) and re-writes its lease: no stale FDB entry stays behind
      const old = mac9v6;
      mac9v6 = '0a:58:0a:56:c8:6a';
      topo.ip(n9.ns, 'link del flannel-v6.1');
      vtep9(mac9v6);
      writeFileSync(file, lease(mac9v6));
      await waitAndReport('n1 and n2 to move to the new MAC', () => programmed(n1, sub9, mac9v6, n9.ip6) && programmed(n2, sub9, mac9v6, n9.ip6), 30_000, 20);
      expect(topo.fdb(n1.ns, 'flannel-v6.1').map((f) => f.mac)).not.toContain(old);
      expect(topo.fdb(n2.ns, 'flannel-v6.1').map((f) => f.mac)).not.toContain(old);
      expect(await topo.ping(p1, 'fd86:0:0:c8::')).toBe(true);

      // drift on the IPv6 VTEP: deleted by hand, put back by the periodic reconcile; unknown entries go
      topo.ip(n1.ns, `-6 route del ${sub9} dev flannel-v6.1`);
      topo.ip(n1.ns, `-6 neigh del fd86:0:0:c8:: dev flannel-v6.1`);
      topo.ip(n1.ns, '-6 route add fd86:0:0:fa::/64 via fd86:0:0:fa:: dev flannel-v6.1 onlink');
      sh(['bridge', '-n', n1.ns, 'fdb', 'add', '0a:00:00:00:fa:06', 'dst', 'fd88:88::fa', 'dev', 'flannel-v6.1', 'self', 'permanent']);
      await waitAndReport('n1 to repair flannel-v6.1', () => {
        const routes = topo.json(n1.ns, '-6 route show dev flannel-v6.1').map((r: any) => r.dst);
        const fdb = topo.fdb(n1.ns, 'flannel-v6.1').map((f) => f.mac);
        return programmed(n1, sub9, mac9v6, n9.ip6) && !routes.includes('fd86:0:0:fa::/64') && !fdb.includes('0a:00:00:00:fa:06');
      }, 30_000);
      expect(d1.log()).toMatch(/route fd86:0:0:fa::\/64: removed \(no lease\)/);
      expect(await topo.ping(p1, 'fd86:0:0:c8::')).toBe(true);

      unlinkSync(file);
      await waitAndReport('n1 and n2 to drop n9', () =>
        gone(n1, sub9, mac9v6, n9.ip6) && gone(n2, sub9, mac9v6, n9.ip6) && gone(n1, '10.86.200.0/24', mac9, n9.ip), 30_000, 20);
    } finally {
      if (existsSync(file)) unlinkSync(file); // the next tests count the leases
    }
  });

  it('a node joining later is programmed over IPv6 (the time it took printed); when it leaves, its IPv6 route, neighbour and FDB entry go', async () => {
    const n3 = topo.addHost('n3', 3);
    const d3 = topo.startDaemon(n3, store, ['--release-on-exit']);
    const { value: name } = await waitFor('n3\'s lease file', () =>
      readdirSync(join(leaseDir, 'subnets')).find((f) => !f.startsWith('.') && ![leaseName(s1), leaseName(s2)].includes(f)), 30_000, 20);
    const s3 = await topo.waitSubnet(d3);
    expect(name).toBe(leaseName(s3));
    const mac3 = mac(n3);
    await waitAndReport('n1 and n2 to program n3 over IPv6', () => programmed(n1, s3.subnet6, mac3, n3.ip6) && programmed(n2, s3.subnet6, mac3, n3.ip6), 30_000, 20);
    expect(await topo.ping(p1, s3.vtepIP6)).toBe(true); // no ADD anywhere for this

    const mac3v4 = mac(n3, 'flannel.1');
    expect(await topo.stopDaemon(d3)).toBe(0);
    expect(existsSync(join(leaseDir, 'subnets', name!))).toBe(false);
    expect(topo.json(n3.ns, 'link show type vxlan')).toEqual([]);
    await waitAndReport('n1 and n2 to forget n3', () =>
      gone(n1, s3.subnet6, mac3, n3.ip6) && gone(n2, s3.subnet6, mac3, n3.ip6) && gone(n1, s3.subnet, mac3v4, n3.ip), 30_000, 20);
    expect(topo.fdb(n1.ns, 'flannel-v6.1').map((f) => f.dst)).not.toContain(n3.ip6);
    expect(await topo.ping(p1, p2.ip6!)).toBe(true);
  });
});

describe('vxlan-flannel IPv6 only', () => {
  it('no IPv4 anywhere: lease keyed by the IPv6 subnet with PublicIP "0.0.0.0", only flannel-v6.1, pods reach each other over IPv6', async () => {
    const dir = join(topo.tmp.path, 'leases6');
    const store6 = ['--lease-dir', dir];
    const n4 = topo.addHost('n4', 4);
    const n5 = topo.addHost('n5', 5);
    const set = await topo.cli(n4, ['network', 'set', '--ipv6-only', '--ipv6-network', NET6_ONLY, ...store6]);
    expect(set.code, set.stderr).toBe(0);
    const d4 = topo.startDaemon(n4, store6);
    const d5 = topo.startDaemon(n5, store6);
    const [s4, s5] = await Promise.all([topo.waitSubnet(d4), topo.waitSubnet(d5)]);
    expect(s4.env).toBe(`FLANNEL_IPV6_NETWORK=${NET6_ONLY}\nFLANNEL_IPV6_SUBNET=${s4.vtepIP6}1/64\nFLANNEL_MTU=${MTU6}\nFLANNEL_IPMASQ=false\n`);
    const key5 = `${s5.vtepIP6}-64`;
    expect(readdirSync(join(dir, 'subnets')).sort()).toEqual([`${s4.vtepIP6}-64`, key5].sort());
    const { Expiration: _e, ...attrs } = JSON.parse(readFileSync(join(dir, 'subnets', key5), 'utf8'));
    expect(JSON.stringify(attrs)).toBe(`{"PublicIP":"0.0.0.0","PublicIPv6":"${n5.ip6}","BackendType":"vxlan","BackendV6Data":{"VNI":1,"VtepMAC":"${mac(n5)}"}}`);
    expect(topo.json(n4.ns, 'link show type vxlan').map((l: any) => l.ifname)).toEqual(['flannel-v6.1']);
    await topo.waitMesh([{ node: n4, subnet: s4.subnet6 }, { node: n5, subnet: s5.subnet6 }], 10_000, 'flannel-v6.1');

    const p4 = await topo.addPod(n4);
    const p5 = await topo.addPod(n5);
    await Promise.all([gatewayReady(n4), gatewayReady(n5)]);
    expect(p4.result.ips).toHaveLength(1);
    expect(p4.ip).toBe(p4.ip6);
    expect(await topo.ping(p4, p5.ip)).toBe(true);
    expect(await topo.ping(p5, p4.ip)).toBe(true);
    expect(await topo.ping(p4, p5.ip, { size: PING6_MAX, dontFragment: true })).toBe(true);
    const check = await topo.plugin(n4, 'CHECK', { ...topo.cniConfig(n4), prevResult: p4.result }, { CNI_CONTAINERID: p4.id, CNI_NETNS: p4.path, CNI_IFNAME: 'eth0' });
    expect(check.code, check.stdout + check.stderr).toBe(0);
    const st = await topo.cli(n4, ['status', '--json', '--subnet-file', topo.subnetFile(n4), ...store6]);
    expect(st.code, st.stdout + st.stderr).toBe(0);
    expect([st.json.peers, st.json.ipv6Peers.map((p: any) => p.subnet)]).toEqual([[], [s5.subnet6]]);
    expect(await topo.stopDaemon(d4)).toBe(0);
    expect(await topo.stopDaemon(d5)).toBe(0);
  });
});

describe('vxlan-flannel dual stack in etcd', () => {
  it('the key is flannel\'s "<IPv4 subnet>&<IPv6 subnet>", the value its LeaseAttrs; the IPv6 mesh works', async () => {
    const PREFIX = '/coreos.com/network';
    const endpoint = await topo.startEtcd();
    const etcdStore = ['--etcd-endpoints', endpoint];
    const set = await topo.cli(topo.hosts.get('etcd')!, ['network', 'set', '--network', NET4, '--ipv6-network', NET6, ...etcdStore]);
    expect(set.code, set.stderr).toBe(0);
    const n6 = topo.addHost('n6', 6);
    const n7 = topo.addHost('n7', 7);
    const d6 = topo.startDaemon(n6, etcdStore);
    const d7 = topo.startDaemon(n7, etcdStore);
    const [s6, s7] = await Promise.all([topo.waitSubnet(d6), topo.waitSubnet(d7)]);
    expect(s6.subnet6).not.toBe(s7.subnet6);
    const keys = await topo.etcdctl(['get', `${PREFIX}/subnets/`, '--prefix', '--keys-only']);
    expect(keys.stdout.split('\n').filter(Boolean).sort()).toEqual([`${PREFIX}/subnets/${leaseName(s6)}`, `${PREFIX}/subnets/${leaseName(s7)}`].sort());
    const value = await topo.etcdctl(['get', `${PREFIX}/subnets/${leaseName(s7)}`, '--print-value-only']);
    expect(value.stdout.trim()).toBe(
      `{"PublicIP":"${n7.ip}","PublicIPv6":"${n7.ip6}","BackendType":"vxlan",` +
        `"BackendData":{"VNI":1,"VtepMAC":"${mac(n7, 'flannel.1')}"},"BackendV6Data":{"VNI":1,"VtepMAC":"${mac(n7)}"}}`,
    );
    await topo.waitMesh([{ node: n6, subnet: s6.subnet6 }, { node: n7, subnet: s7.subnet6 }], 10_000, 'flannel-v6.1');
    // VTEP to VTEP across the IPv6 underlay, at the IPv6 VTEP's MTU
    expect(await topo.ping(n6, s7.vtepIP6, { size: PING6_MAX, dontFragment: true })).toBe(true);
    expect(await topo.ping(n7, s6.vtepIP, { size: 1450 - 28, dontFragment: true })).toBe(true);
    expect(await topo.stopDaemon(d6)).toBe(0);
    expect(await topo.stopDaemon(d7)).toBe(0);
    await sleep(0);
  });
});
