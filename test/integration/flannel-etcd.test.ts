// vxlan-flannel with real etcd: three node namespaces on an underlay bridge,
// each running the daemon, pods attached through the CNI plugin inside the
// node namespace, traffic across nodes over VXLAN.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/ports';
import { DaemonHandle, ETCD_IP, FLANNEL, Host, NETWORK, Pod, Topology, sleep, printDaemonLogsOnFailure } from './flannel-topology';
import { waitFor, waitAndReport } from '../support/wait';
import { memoryHolds, runIn, sh } from './helpers';
import { EtcdStore } from '../../src/flannel/store/etcd-store';
import { leaseStoreContract } from '../support/store-contract';


const PREFIX = '/coreos.com/network';
let topo: Topology;
let etcd: string;
let store: string[];
let n1: Host, n2: Host, n3: Host;
let d1: DaemonHandle, d2: DaemonHandle, d3: DaemonHandle;
let s1: { subnet: string; vtepIP: string }, s2: { subnet: string; vtepIP: string }, s3: { subnet: string; vtepIP: string };
let p1: Pod, p2: Pod, p3: Pod;

const leaseOf = async (subnet: string) => {
  const r = await topo.etcdctl(['get', `${PREFIX}/subnets/${subnet.replace('/', '-')}`, '--print-value-only']);
  return r.stdout.trim() ? JSON.parse(r.stdout) : undefined;
};
/** The third octet of a pool subnet no lease holds now: for a hand-written lease that a node must adopt. */
const freePoolOctet = async () => {
  const keys = (await topo.etcdctl(['get', `${PREFIX}/subnets/`, '--prefix', '--keys-only'])).stdout;
  for (let i = 99; i >= 1; i--) if (!keys.includes(`/subnets/10.88.${i}.0-24`)) return i;
  throw new Error(`no free subnet left in 10.88.1.0-10.88.99.0:\n${keys}`);
};
const vtepMac = (node: Host) => topo.json(node.ns, 'link show dev flannel.1')[0].address as string;

beforeAll(async () => {
  topo = new Topology('fle');
  n1 = topo.addHost('n1', 1);
  n2 = topo.addHost('n2', 2);
  n3 = topo.addHost('n3', 3);
  etcd = await topo.startEtcd();
  store = ['--etcd-endpoints', etcd];
  // Nodes pick random subnets from 10.88.1.0-10.88.99.0 only: the leases these tests write by hand
  // for made-up peers (10.88.200.0 and up) can never collide with a node's own.
  const set = await topo.cli(topo.hosts.get('etcd')!, ['network', 'set', '--network', NETWORK, '--subnet-max', '10.88.99.0', ...store]);
  expect(set.code, set.stderr).toBe(0);
  // two nodes starting at the same moment
  d1 = topo.startDaemon(n1, store);
  d2 = topo.startDaemon(n2, store);
  [s1, s2] = await Promise.all([topo.waitSubnet(d1), topo.waitSubnet(d2)]);
  await topo.waitMesh([{ node: n1, subnet: s1.subnet }, { node: n2, subnet: s2.subnet }]);
}, 60_000);

printDaemonLogsOnFailure(() => ({ d1, d2, d3 }));

afterAll(async () => {
  await topo?.cleanup();
});

describe('vxlan-flannel with etcd', () => {
  it('nodes starting together get distinct subnets, stored in flannel\'s schema under a 24 h etcd lease', async () => {
    expect(s1.subnet).not.toBe(s2.subnet);
    for (const s of [s1, s2]) expect(Number(s.subnet.split('.')[2]), s.subnet).toBeLessThanOrEqual(99); // SubnetMax
    const cfg = await topo.etcdctl(['get', `${PREFIX}/config`, '--print-value-only']);
    expect(JSON.parse(cfg.stdout)).toEqual({ Network: NETWORK, SubnetMax: '10.88.99.0', Backend: { Type: 'vxlan' } });
    const raw = await topo.etcdctl(['get', `${PREFIX}/subnets/${s1.subnet.replace('/', '-')}`, '-w', 'json']);
    const kv = JSON.parse(raw.stdout).kvs[0];
    expect(Buffer.from(kv.value, 'base64').toString()).toBe(
      `{"PublicIP":"${n1.ip}","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${vtepMac(n1)}"}}`,
    );
    const leaseId = BigInt(/"lease":(\d+)/.exec(raw.stdout)![1]); // int64: beyond JSON.parse's precision
    const ttl = await topo.etcdctl(['lease', 'timetolive', leaseId.toString(16), '-w', 'json']);
    expect(JSON.parse(ttl.stdout)['granted-ttl'], ttl.stdout).toBe(86400);
  });

  it('has the etcd client loaded (the kube daemons\' memory is scanned for the same code: flannel-kube.test.ts)', () => {
    for (const marker of ['/v3/kv/range', 'create_request']) expect(memoryHolds(d1.proc.pid!, marker), marker).toBe(true);
  });

  it('the VTEP is flannel\'s: nolearning, port 8472, local = public IP, dev eth0, MTU 1450, the subnet address /32', () => {
    const [link] = topo.json(n1.ns, '-d addr show dev flannel.1');
    expect(link.linkinfo.info_data).toMatchObject({ id: 1, local: n1.ip, link: 'eth0', port: 8472, learning: false });
    expect(link.mtu).toBe(1450);
    expect(link.flags).toContain('UP');
    expect(link.addr_info.filter((a: any) => a.family === 'inet')).toMatchObject([{ local: s1.vtepIP, prefixlen: 32 }]);
    const env = topo.subnetFile(n1);
    expect(existsSync(env)).toBe(true);
  });

  it('pods on two nodes reach each other, also with packets at the MTU (and not above it)', async () => {
    p1 = await topo.addPod(n1);
    p2 = await topo.addPod(n2);
    expect(p1.ip.startsWith(s1.subnet.split('.').slice(0, 3).join('.'))).toBe(true);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    expect(await topo.ping(p2, p1.ip)).toBe(true);
    const [eth0] = topo.json(p1.ns, 'link show dev eth0');
    expect(eth0.mtu).toBe(1450);
    expect(await topo.ping(p1, p2.ip, { size: 1450 - 28, dontFragment: true })).toBe(true);
    expect(await topo.ping(p2, p1.ip, { size: 1450 - 28, dontFragment: true })).toBe(true);
    expect(await topo.ping(p1, p2.ip, { size: 1450 - 28 + 1, dontFragment: true, timeoutS: 1, attempts: 1 })).toBe(false);
  });

  it('CHECK and STATUS through the plugin; `status` shows every peer in place', async () => {
    const env = { CNI_CONTAINERID: p1.id, CNI_NETNS: p1.path, CNI_IFNAME: 'eth0' };
    const check = await topo.plugin(n1, 'CHECK', { ...topo.cniConfig(n1), prevResult: p1.result }, env);
    expect(check.code, check.stdout + check.stderr).toBe(0);
    // the overlay's own part of CHECK: a VTEP that is down fails it
    d1.proc.kill('SIGSTOP'); // so its reconcile does not repair the VTEP before CHECK looks
    try {
      topo.ip(n1.ns, 'link set flannel.1 down');
      const down = await topo.plugin(n1, 'CHECK', { ...topo.cniConfig(n1), prevResult: p1.result }, env);
      expect(down.json?.msg).toMatch(/VTEP flannel.1 is down/);
      const unavailable = await topo.plugin(n1, 'STATUS', { ...topo.cniConfig(n1), cniVersion: '1.1.0' });
      expect([unavailable.json?.code, unavailable.json?.msg]).toEqual([50, 'overlay not ready: VTEP flannel.1 is down']);
    } finally {
      d1.proc.kill('SIGCONT');
    }
    await waitAndReport('d1 to bring its VTEP up again', () => topo.json(n1.ns, 'link show dev flannel.1')[0].flags.includes('UP'), 30_000);
    const status = await topo.plugin(n1, 'STATUS', { ...topo.cniConfig(n1), cniVersion: '1.1.0' });
    expect(status.code, status.stdout).toBe(0);
    const st = await topo.cli(n1, ['status', '--json', '--subnet-file', topo.subnetFile(n1), ...store]);
    expect(st.code, st.stdout + st.stderr).toBe(0);
    expect(st.json.peers).toEqual([{ subnet: s2.subnet, publicIP: n2.ip, vtepMAC: vtepMac(n2), neigh: true, fdb: true, route: true }]);
    expect(st.json.problems).toEqual([]);
  });

  it('a node joining later is programmed on the others (the time it took printed) and reachable without any ADD there', async () => {
    d3 = topo.startDaemon(n3, store, ['--release-on-exit']);
    // the moment its lease is in etcd
    const { value: key } = await waitFor('n3\'s lease in etcd', async () => {
      const r = await topo.etcdctl(['get', `${PREFIX}/subnets/`, '--prefix', '--keys-only']);
      return r.stdout.split('\n').map((l) => l.trim()).filter((k) => k.includes('/subnets/')).length === 3 && r.stdout;
    }, 30_000, 20);
    expect(key).toBeTruthy();
    s3 = await topo.waitSubnet(d3);
    const mac3 = vtepMac(n3);
    await waitAndReport('n1 and n2 to program n3', () => {
      const a = topo.peerState(n1.ns, s3.subnet, mac3, n3.ip);
      const b = topo.peerState(n2.ns, s3.subnet, mac3, n3.ip);
      return a.neigh && a.fdb && a.route && b.neigh && b.fdb && b.route;
    }, 30_000, 20);
    // n3's own VTEP address answers pods of n1 and n2: no pod was added anywhere for this
    expect(await topo.ping(p1, s3.vtepIP)).toBe(true);
    expect(await topo.ping(p2, s3.vtepIP)).toBe(true);
    p3 = await topo.addPod(n3);
    expect(await topo.ping(p1, p3.ip)).toBe(true);
    expect(await topo.ping(p3, p2.ip)).toBe(true);
  });

  it('a peer whose VTEP MAC changes leaves no stale FDB entry on the others', async () => {
    // n3 crashes and comes back with a new VTEP (its lease is re-written with the new MAC, as flanneld does)
    await topo.stopDaemon(d3, 'SIGKILL');
    const oldMac = vtepMac(n3);
    topo.ip(n3.ns, 'link del flannel.1');
    const newMac = '0a:58:0a:58:33:33';
    const lease = await leaseOf(s3.subnet);
    lease.BackendData.VtepMAC = newMac;
    const put = await topo.etcdctl(['put', `${PREFIX}/subnets/${s3.subnet.replace('/', '-')}`, JSON.stringify(lease), '--ignore-lease']);
    expect(put.code, put.stderr).toBe(0);
    await waitAndReport('n1 to move to the new MAC', () => {
      const st = topo.peerState(n1.ns, s3.subnet, newMac, n3.ip);
      return st.neigh && st.fdb && st.route && st.staleFdb.length === 0;
    }, 30_000, 20);
    expect(topo.fdb(n1.ns, 'flannel.1').map((f) => f.mac)).not.toContain(oldMac);
    expect(topo.fdb(n2.ns, 'flannel.1').map((f) => f.mac)).not.toContain(oldMac);
    d3 = topo.startDaemon(n3, store, ['--release-on-exit']);
    await waitFor('n3\'s VTEP with the lease\'s MAC, and n3 programming n1', () => {
      const st = topo.peerState(n3.ns, s1.subnet, vtepMac(n1), n1.ip);
      return vtepMac(n3) === newMac && st.neigh && st.fdb && st.route;
    }, 30_000);
    expect(await topo.ping(p1, p3.ip), d3.log()).toBe(true);
  });

  it('entries deleted by hand come back, unknown ones go, a deleted VTEP is recreated', async () => {
    const mac2 = vtepMac(n2);
    topo.ip(n1.ns, `route del ${s2.subnet} dev flannel.1`);
    topo.ip(n1.ns, `neigh del ${s2.vtepIP} dev flannel.1`);
    topo.ip(n1.ns, `route add 10.88.250.0/24 via 10.88.250.0 dev flannel.1 onlink`);
    topo.ip(n1.ns, `neigh add 10.88.250.0 lladdr 0a:00:00:00:fa:00 dev flannel.1 nud permanent`);
    const { sh } = await import('./helpers');
    sh(['bridge', '-n', n1.ns, 'fdb', 'del', mac2, 'dst', n2.ip, 'dev', 'flannel.1', 'self']);
    sh(['bridge', '-n', n1.ns, 'fdb', 'add', '0a:00:00:00:fa:00', 'dst', '192.168.88.250', 'dev', 'flannel.1', 'self', 'permanent']);
    await waitAndReport('n1 to repair its peers', () => {
      const st = topo.peerState(n1.ns, s2.subnet, mac2, n2.ip);
      const routes = topo.json(n1.ns, 'route show dev flannel.1').map((r: any) => r.dst);
      const fdb = topo.fdb(n1.ns, 'flannel.1').map((f) => f.mac);
      return st.neigh && st.fdb && st.route && !routes.includes('10.88.250.0/24') && !fdb.includes('0a:00:00:00:fa:00');
    }, 30_000);
    expect(d1.log()).toMatch(/route 10.88.250.0\/24: removed \(no lease\)/);

    const mac1 = vtepMac(n1);
    topo.ip(n1.ns, 'link del flannel.1');
    await waitAndReport('n1 to recreate its VTEP and its peers', () => {
      const a = topo.peerState(n1.ns, s2.subnet, mac2, n2.ip);
      return a.neigh && a.fdb && a.route;
    }, 30_000);
    expect(vtepMac(n1)).toBe(mac1); // same MAC: the peers need no change
    expect(d1.log()).toMatch(/VTEP flannel.1 was missing .*: recreated/);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
  });

  it('a lease written by hand in flannel\'s exact JSON (a flanneld node) is programmed and reachable', async () => {
    // "n9" plays a flanneld node: its VTEP and its routes to n1 made by hand, its lease put with etcdctl
    const n9 = topo.addHost('n9', 9);
    const mac9 = '0a:58:0a:58:c8:09';
    topo.ip(n9.ns, `link add flannel.1 address ${mac9} mtu 1450 type vxlan id 1 local ${n9.ip} dev eth0 dstport 8472 nolearning`);
    topo.ip(n9.ns, 'addr add 10.88.200.0/32 dev flannel.1');
    topo.ip(n9.ns, 'link set flannel.1 up');
    const mac1 = vtepMac(n1);
    topo.ip(n9.ns, `neigh replace ${s1.vtepIP} lladdr ${mac1} dev flannel.1 nud permanent`);
    const { sh } = await import('./helpers');
    sh(['bridge', '-n', n9.ns, 'fdb', 'replace', mac1, 'dst', n1.ip, 'dev', 'flannel.1', 'self', 'permanent']);
    topo.ip(n9.ns, `route replace ${s1.subnet} via ${s1.vtepIP} dev flannel.1 onlink`);

    const grant = await topo.etcdctl(['lease', 'grant', '600']);
    const leaseId = /lease ([0-9a-f]+) granted/.exec(grant.stdout)![1];
    const value = `{"PublicIP":"${n9.ip}","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${mac9}"}}`;
    const put = await topo.etcdctl(['put', `${PREFIX}/subnets/10.88.200.0-24`, value, `--lease=${leaseId}`]);
    expect(put.code, put.stderr).toBe(0);
    for (const n of [n1, n2, n3]) {
      await waitAndReport(`${n.name} to program the flanneld lease`, () => {
        const st = topo.peerState(n.ns, '10.88.200.0/24', mac9, n9.ip);
        return st.neigh && st.fdb && st.route;
      }, 30_000, 20);
    }
    expect(await topo.ping(p1, '10.88.200.0')).toBe(true);

    // the flanneld node goes away (its etcd lease is revoked): everyone forgets it
    await topo.etcdctl(['lease', 'revoke', leaseId]);
    await waitAndReport('n1 to drop the flanneld node', () => {
      const st = topo.peerState(n1.ns, '10.88.200.0/24', mac9, n9.ip);
      return !st.neigh && !st.fdb && !st.route;
    }, 30_000, 20);
  });

  it('a node whose own lease was written by flanneld ("PublicIPv6":null, its spelling) starts and keeps that subnet', async () => {
    const n5 = topo.addHost('n5', 5);
    const i = await freePoolOctet();
    const grant = await topo.etcdctl(['lease', 'grant', '600']);
    const leaseId = /lease ([0-9a-f]+) granted/.exec(grant.stdout)![1];
    // exactly what flanneld v0.2x puts: PublicIPv6 has no omitempty
    const value = `{"PublicIP":"${n5.ip}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:7b:05"}}`;
    const put = await topo.etcdctl(['put', `${PREFIX}/subnets/10.88.${i}.0-24`, value, `--lease=${leaseId}`]);
    expect(put.code, put.stderr).toBe(0);
    const d5 = topo.startDaemon(n5, store, ['--release-on-exit']);
    try {
      const s5 = await topo.waitSubnet(d5);
      expect(s5.subnet, d5.log()).toBe(`10.88.${i}.0/24`);
      expect(d5.log()).toContain(`lease 10.88.${i}.0/24 (reused)`);
      expect(vtepMac(n5)).toBe('0a:58:0a:58:7b:05'); // the MAC the lease advertised: no peer needs a change
      expect(await leaseOf(`10.88.${i}.0/24`)).toEqual({ PublicIP: n5.ip, BackendType: 'vxlan', BackendData: { VNI: 1, VtepMAC: '0a:58:0a:58:7b:05' } });
    } finally {
      expect(await topo.stopDaemon(d5)).toBe(0);
    }
    expect(await leaseOf(`10.88.${i}.0/24`)).toBeUndefined();
  });

  it('a node with a flannel reservation (a key without an etcd lease) adopts it and it stays a reservation', async () => {
    const n6 = topo.addHost('n6', 6);
    const i = await freePoolOctet();
    const key = `${PREFIX}/subnets/10.88.${i}.0-24`;
    const put = await topo.etcdctl(['put', key, `{"PublicIP":"${n6.ip}","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:7c:06"}}`]);
    expect(put.code, put.stderr).toBe(0);
    const etcdLease = async () => {
      const r = await topo.etcdctl(['get', key, '-w', 'json']);
      const kv = JSON.parse(r.stdout).kvs?.[0];
      return kv ? String(/"lease":(\d+)/.exec(r.stdout)?.[1] ?? 0) : 'gone';
    };
    // a short TTL: a lease would be renewed (re-attached to a new etcd lease) every few seconds
    const d6 = topo.startDaemon(n6, store, ['--lease-ttl', '10']);
    try {
      expect((await topo.waitSubnet(d6)).subnet, d6.log()).toBe(`10.88.${i}.0/24`);
      expect(await etcdLease()).toBe('0');
      expect(d6.log()).toContain(`lease 10.88.${i}.0/24 (reused, a reservation: kept without a TTL)`);
      // The witness that d6's renewal time has passed: a node leasing with the same TTL after d6 renews
      // its own lease (renewal is due half a TTL after the lease was taken, on the same clock).
      const control = topo.startDaemon(topo.addHost('n16', 16), store, ['--lease-ttl', '10', '--release-on-exit']);
      try {
        await topo.waitSubnet(control);
        await waitFor('a 10 s lease taken after d6\'s to be renewed', () => /renewed lease/.test(control.log()), 30_000);
      } finally {
        expect(await topo.stopDaemon(control)).toBe(0);
      }
      expect(await etcdLease()).toBe('0');
      expect(d6.log()).not.toMatch(/renewed lease/);
    } finally {
      expect(await topo.stopDaemon(d6)).toBe(0);
    }
    expect(await etcdLease()).toBe('0'); // kept for the next start, as flanneld does
    await topo.etcdctl(['del', key]);
  });

  it('etcd cancels the watch of a node cut off while history was compacted: it watches again and catches up at once', async () => {
    const n7 = topo.addHost('n7', 7);
    // the periodic reconcile is far away: only the watch can bring changes in time
    const d7 = topo.startDaemon(n7, store, ['--reconcile-interval', '120', '--release-on-exit']);
    const cut = ['ip', 'netns', 'exec', n7.ns, 'iptables', '-p', 'tcp', '-d', ETCD_IP, '--dport', '2379', '-j', 'REJECT', '--reject-with', 'tcp-reset'];
    const lease = (octet: number) => `{"PublicIP":"192.168.88.${octet}","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:58:7d:${octet.toString(16)}"}}`;
    const programmed = (subnet: string, octet: number) => {
      const st = topo.peerState(n7.ns, subnet, `0a:58:0a:58:7d:${octet.toString(16)}`, `192.168.88.${octet}`);
      return st.neigh && st.fdb && st.route;
    };
    try {
      await topo.waitSubnet(d7);
      await waitFor('d7 to run', () => /running:/.test(d7.log()), 30_000);
      // n7 loses etcd: its connection is killed and new ones are refused (its watch keeps trying to attach again)
      sh([...cut.slice(0, 5), '-I', 'OUTPUT', ...cut.slice(5)]);
      const cutAt = d7.log().length;
      sh(['ip', 'netns', 'exec', n7.ns, 'ss', '-K', 'dst', ETCD_IP, 'dport', '=', '2379']);
      await waitFor('d7 to notice that its watch broke', () => /watch: /.test(d7.log().slice(cutAt)), 30_000, 50);
      // meanwhile a peer joins and etcd compacts its history past the revision n7's watch would resume from
      expect((await topo.etcdctl(['put', `${PREFIX}/subnets/10.88.125.0-24`, lease(125)])).code).toBe(0);
      expect((await topo.etcdctl(['put', '/fle-test/other', 'x'])).code).toBe(0); // one more write: compacting to now drops n7's resume revision
      const rev = JSON.parse((await topo.etcdctl(['get', `${PREFIX}/config`, '-w', 'json'])).stdout).header.revision;
      const compact = await topo.etcdctl(['compact', String(rev)]);
      expect(compact.code, compact.stderr).toBe(0);
      sh([...cut.slice(0, 5), '-D', 'OUTPUT', ...cut.slice(5)]);
      // the watch attaches again from the revision after the last it saw, now compacted: etcd cancels it
      await waitFor('d7 to program the peer that joined while it was cut off', () => programmed('10.88.125.0/24', 125), 30_000, 50);
      // and the watch is live again
      expect((await topo.etcdctl(['put', `${PREFIX}/subnets/10.88.126.0-24`, lease(126)])).code).toBe(0);
      // well before the periodic reconcile (120 s): the watch brought it
      await waitAndReport('d7 to program the next peer', () => programmed('10.88.126.0/24', 126), 30_000, 20);
      expect(d7.log()).toMatch(/cancelled the watch .*; watching again from now/);
    } finally {
      try {
        sh([...cut.slice(0, 5), '-D', 'OUTPUT', ...cut.slice(5)]);
      } catch {
        // already removed
      }
      await topo.etcdctl(['del', `${PREFIX}/subnets/10.88.125.0-24`]);
      await topo.etcdctl(['del', `${PREFIX}/subnets/10.88.126.0-24`]);
      await topo.etcdctl(['del', '/fle-test/other']);
      expect(await topo.stopDaemon(d7)).toBe(0);
    }
  }, 60_000);

  it('an etcd that requires client certificates: --etcd-certfile/--etcd-keyfile are presented without --etcd-cafile too', async () => {
    const tls = await topo.startTlsEtcd('etcdtls', 101);
    const flags = ['--etcd-endpoints', tls.endpoint, '--etcd-certfile', tls.cert, '--etcd-keyfile', tls.key];
    // no --etcd-cafile: the server is checked against the system's CAs (OpenSSL's default file, here our throwaway CA)
    const env = { SSL_CERT_FILE: tls.ca };
    const set = await runIn(tls.host.path, [FLANNEL, 'network', 'set', '--network', NETWORK, ...flags], env);
    expect(set.code, set.stderr).toBe(0);
    const get = await runIn(tls.host.path, [FLANNEL, 'network', 'get', ...flags], env);
    expect([get.code, get.stdout.trim()], get.stderr).toEqual([0, `{"Network":"${NETWORK}","Backend":{"Type":"vxlan"}}`]);
    // with the CA given, the same
    const withCa = await runIn(tls.host.path, [FLANNEL, 'network', 'get', ...flags, '--etcd-cafile', tls.ca]);
    expect(withCa.code, withCa.stderr).toBe(0);
    // and without a client certificate the server refuses us
    const anonymous = await runIn(tls.host.path, [FLANNEL, 'network', 'get', '--etcd-endpoints', tls.endpoint, '--etcd-cafile', tls.ca]);
    expect(anonymous.code).not.toBe(0);
  }, 60_000);

  it('etcd down: clear log lines, the overlay keeps working; etcd back: the daemons carry on', async () => {
    await topo.stopEtcd();
    await waitFor('d1 to notice etcd is down', () => /unreachable/.test(d1.log()) && /keeping the overlay/.test(d1.log()), 30_000, 200);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    expect(await topo.ping(p3, p1.ip)).toBe(true);
    const st = topo.peerState(n1.ns, s2.subnet, vtepMac(n2), n2.ip);
    expect(st.neigh && st.fdb && st.route).toBe(true);
    const before = [d1, d2, d3].map((d) => d.log().length);
    await topo.startEtcd();
    await waitFor('d1 to reach etcd again', () => /reachable again/.test(d1.log().slice(before[0])), 30_000, 100);
    // every daemon's watch (all were cut off) comes back soon after etcd answers: it attaches again
    // every second at most (a backoff grown to 30 s would leave it down long after etcd is back)
    for (const [i, d] of [d1, d2, d3].entries()) {
      await waitFor(`d${i + 1}'s watch to deliver again`, () => /watch: receiving changes from .* again/.test(d.log().slice(before[i])), 30_000, 100);
    }
    expect(await topo.ping(p1, p2.ip)).toBe(true);
  });

  it('a node leaving is cleaned from the others (its lease, VTEP and subnet.env go)', async () => {
    const mac3 = vtepMac(n3);
    expect(await topo.stopDaemon(d3, 'SIGTERM')).toBe(0);
    expect(await leaseOf(s3.subnet)).toBeUndefined();
    expect(existsSync(topo.subnetFile(n3))).toBe(false);
    expect(topo.json(n3.ns, 'link show type vxlan')).toEqual([]);
    await waitAndReport('n1 and n2 to forget n3', () => {
      const a = topo.peerState(n1.ns, s3.subnet, mac3, n3.ip);
      const b = topo.peerState(n2.ns, s3.subnet, mac3, n3.ip);
      return !a.neigh && !a.fdb && !a.route && !b.neigh && !b.fdb && !b.route;
    }, 30_000, 20);
    expect(await topo.ping(p1, p2.ip)).toBe(true);
    // the plugin on the node that left reports it cannot serve
    const status = await topo.plugin(n3, 'STATUS', { ...topo.cniConfig(n3), cniVersion: '1.1.0' });
    expect([status.code, status.json?.code]).toEqual([1, 50]);
    expect(status.json.msg).toMatch(/no overlay lease on this node: .*subnet.env does not exist/);
  });

  it('GC through the real delegate chain: stale saved config removed and its address released', async () => {
    const p4 = await topo.addPod(n2);
    const ipamDir = join(topo.tmp.path, 'n2', 'ipam', `${topo.prefix}-podnet`);
    expect(readdirSync(ipamDir)).toContain(p4.ip);
    const r = await topo.plugin(n2, 'GC', {
      ...topo.cniConfig(n2),
      cniVersion: '1.1.0',
      'cni.dev/valid-attachments': [{ containerID: p2.id, ifname: 'eth0' }],
    });
    expect(r.code, r.stdout + r.stderr).toBe(0);
    // the attachment's file and flannel's <containerID> copy of it
    expect(readdirSync(join(topo.tmp.path, 'n2', 'flannel-data')).sort()).toEqual([p2.id, `${topo.prefix}-podnet:${p2.id}:eth0`].sort());
    expect(readdirSync(ipamDir)).not.toContain(p4.ip);
    expect(readdirSync(ipamDir)).toContain(p2.ip);
  });

  it('DEL through the plugin removes the saved config; a second DEL is still success', async () => {
    const dataDir = join(topo.tmp.path, 'n1', 'flannel-data');
    expect(readdirSync(dataDir)).toContain(`${topo.prefix}-podnet:${p1.id}:eth0`);
    expect(readdirSync(dataDir)).toContain(p1.id); // flannel's own file
    const r = await topo.delPod(p1);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(readdirSync(dataDir).filter((f) => f.includes(p1.id))).toEqual([]);
    expect(topo.json(p1.ns, 'link show').map((l: any) => l.ifname)).toEqual(['lo']);
    expect((await topo.delPod(p1)).code).toBe(0);
    await sleep(0);
  });

  it('an --etcd-endpoints URL that is not etcd (a web server answering 404): the error names the URL and what it likely is', async () => {
    const web = topo.addHost('web', 60);
    const script = "require('http').createServer((q, s) => { s.writeHead(404); s.end(); }).listen(8080, () => console.log('listening'))";
    const server = spawn('nsenter', [`--net=${web.path}`, '--', process.execPath, '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise((r) => server.stdout!.once('data', r));
      const r = await topo.cli(n2, ['leases', '--etcd-endpoints', `http://${web.ip}:8080`]);
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(`vxlan-flannel: etcd http://${web.ip}:8080: HTTP 404: it does not answer etcd v3's API (not etcd, not its client URL, or an etcd with --enable-grpc-gateway=false?)\n`);
    } finally {
      server.kill();
    }
  });
});

describe('Backend.DirectRouting (flanneld\'s): peers on the same underlay subnet are routed without VXLAN', () => {
  const DIRECT_NET = '10.55.0.0/16';
  let n11: Host, n12: Host;
  let d11: DaemonHandle | undefined, d12: DaemonHandle | undefined;
  let s11: { subnet: string; vtepIP: string }, s12: { subnet: string; vtepIP: string };
  let p11: Pod, p12: Pod;
  let direct: string[];
  const routeTo = (on: Host, subnet: string) => topo.json<{ dst: string; gateway?: string; dev: string }[]>(on.ns, `route show ${subnet}`);
  printDaemonLogsOnFailure(() => ({ d11, d12 }));

  beforeAll(async () => {
    n11 = topo.addHost('n11', 11);
    n12 = topo.addHost('n12', 12);
    direct = ['--etcd-endpoints', etcd, '--etcd-prefix', '/direct/network'];
    const set = await topo.cli(topo.hosts.get('etcd')!, ['network', 'set', '--network', DIRECT_NET, '--subnet-max', '10.55.99.0', '--direct-routing', ...direct]);
    expect(set.code, set.stderr).toBe(0);
    // --ip-masq as kube-flannel runs it: without it the bridge masquerades pod traffic leaving by eth0 to the
    // node's address, and a pod without a default route cannot answer that (flanneld's nodes alike)
    d11 = topo.startDaemon(n11, direct, ['--ip-masq']);
    d12 = topo.startDaemon(n12, direct, ['--ip-masq', '--release-on-exit']);
    [s11, s12] = await Promise.all([topo.waitSubnet(d11), topo.waitSubnet(d12)]);
    await waitFor('each node to route the other directly', () => routeTo(n11, s12.subnet)[0]?.dev === 'eth0' && routeTo(n12, s11.subnet)[0]?.dev === 'eth0', 30_000);
    [p11, p12] = [await topo.addPod(n11), await topo.addPod(n12)];
  }, 60_000);

  it('a peer on eth0\'s subnet: `<subnet> via <its public IP> dev eth0`, no neighbour, FDB entry or VTEP route; pods reach each other', async () => {
    expect(routeTo(n11, s12.subnet)).toMatchObject([{ dst: s12.subnet, gateway: n12.ip, dev: 'eth0' }]);
    expect(routeTo(n12, s11.subnet)).toMatchObject([{ dst: s11.subnet, gateway: n11.ip, dev: 'eth0' }]);
    const mac7 = vtepMac(n12);
    expect(topo.peerState(n11.ns, s12.subnet, mac7, n12.ip)).toEqual({ neigh: false, fdb: false, route: false, staleFdb: [] });
    expect(await topo.ping(p11, p12.ip)).toBe(true);
    expect(await topo.ping(p12, p11.ip)).toBe(true);
    expect(d11!.log()).toMatch(/DirectRouting \(peers on 192\.168\.88\.0\/24, fd88:88::\/64 routed directly\)/);
  });

  it('a peer on another underlay subnet stays on VXLAN; `status` checks each in its own form', async () => {
    const mac = '0a:58:0a:37:c8:09';
    const put = await topo.etcdctl(['put', '/direct/network/subnets/10.55.200.0-24', `{"PublicIP":"192.168.99.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${mac}"}}`]);
    expect(put.code, put.stderr).toBe(0);
    await waitAndReport('n11 to program the VXLAN peer', () => {
      const st = topo.peerState(n11.ns, '10.55.200.0/24', mac, '192.168.99.9');
      return st.neigh && st.fdb && st.route;
    }, 30_000, 50);
    const st = await topo.cli(n11, ['status', '--json', '--subnet-file', topo.subnetFile(n11), ...direct]);
    expect(st.code, st.stdout + st.stderr).toBe(0);
    expect(st.json.peers).toHaveLength(2);
    expect(st.json.peers).toEqual(
      expect.arrayContaining([
        { subnet: s12.subnet, publicIP: n12.ip, vtepMAC: vtepMac(n12), direct: true, route: true },
        { subnet: '10.55.200.0/24', publicIP: '192.168.99.9', vtepMAC: mac, neigh: true, fdb: true, route: true },
      ]),
    );
    expect(st.json.problems).toEqual([]);
    const text = await topo.cli(n11, ['status', '--subnet-file', topo.subnetFile(n11), ...direct]);
    expect(text.stdout.split('\n').find((l) => l.includes(s12.subnet))).toMatch(/ +- +- +ok \(direct\)$/);
    // the direct route deleted by hand: status says so, the reconcile puts it back. The daemon is
    // paused meanwhile: its 1 s reconcile would otherwise repair the route before a slow status looks.
    d11!.proc.kill('SIGSTOP');
    let broken: Awaited<ReturnType<typeof topo.cli>>;
    try {
      topo.ip(n11.ns, `route del ${s12.subnet} via ${n12.ip} dev eth0`);
      broken = await topo.cli(n11, ['status', '--json', '--subnet-file', topo.subnetFile(n11), ...direct]);
    } finally {
      d11!.proc.kill('SIGCONT');
    }
    expect([broken.code, broken.json.problems]).toEqual([1, [`peer ${s12.subnet}: direct route missing or wrong`]]);
    await waitAndReport('the direct route to be put back', () => routeTo(n11, s12.subnet)[0]?.gateway === n12.ip, 30_000, 50);
    await topo.etcdctl(['del', '/direct/network/subnets/10.55.200.0-24']);
  });

  it('a direct peer leaving: its route goes', async () => {
    expect(await topo.stopDaemon(d12!)).toBe(0);
    await waitAndReport('n11 to drop the direct route', () => routeTo(n11, s12.subnet).length === 0, 30_000, 50);
    expect(await topo.stopDaemon(d11!)).toBe(0);
  });
});

// The lease store contract every store meets (MemStore and FileStore in the unit tests), here on
// EtcdStore against a real etcd. The store runs in this test process, which cannot enter a network
// namespace: this etcd listens on the loopback, on ports free at the time, with a data dir of its own.
describe('EtcdStore against a real etcd', () => {
  let proc: ChildProcess | undefined;
  let dataDir: string;
  let endpoint: string;
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'etcd-contract-'));
    const [client, peer] = [await freePort(), await freePort()];
    endpoint = `http://127.0.0.1:${client}`;
    const peerUrl = `http://127.0.0.1:${peer}`;
    proc = spawn('/usr/bin/etcd', ['--name', 'contract', '--data-dir', join(dataDir, 'data'), '--listen-client-urls', endpoint, '--advertise-client-urls', endpoint,
      '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl, '--initial-cluster', `contract=${peerUrl}`, '--log-level', 'warn'], { stdio: 'ignore' });
    await waitFor('the contract\'s etcd to answer', async () => {
      const store = await EtcdStore.open({ etcdEndpoints: [endpoint], etcdTimeoutMs: 1000 });
      try {
        return (await store.list()) !== undefined;
      } finally {
        await store.close();
      }
    }, 30_000, 200);
  }, 60_000);
  afterAll(async () => {
    if (proc && proc.exitCode === null) {
      const exited = new Promise((r) => proc!.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  let n = 0;
  leaseStoreContract('EtcdStore', async () => ({ store: await EtcdStore.open({ etcdEndpoints: [endpoint], etcdPrefix: `/contract/${++n}` }) }));
});
