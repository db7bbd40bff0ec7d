// The operator commands on the embedded file store (a temp directory): what
// they print, what they change, and their errors. The daemon command is run
// by the integration tests (it needs a node).
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP, Prefix } from '../../../src/net/ip';
import { main } from '../../../src/cli/vxlan-flannel';
import { FileStore } from '../../../src/flannel/store/file-store';
import type { LeaseAttrs } from '../../../src/flannel/lease';
import { KubeApiServer, startKubeApiServer } from '../../support/kube-apiserver';

describe('vxlan-flannel operator commands (file store)', () => {
  let dir: string;
  let out: string;
  let err: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-cli-'));
    out = '';
    err = '';
    vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
    vi.spyOn(process.stderr, 'write').mockImplementation((s) => ((err += String(s)), true));
  });
  afterEach(() => {
    vi.restoreAllMocks();
    process.exitCode = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  /** Runs `vxlan-flannel <args> --lease-dir <dir>`; returns the exit code it set. */
  const cli = async (...args: string[]): Promise<number> => {
    out = '';
    err = '';
    process.exitCode = undefined;
    await main(['node', 'vxlan-flannel', ...args, '--lease-dir', dir]);
    return Number(process.exitCode ?? 0);
  };
  const attrs = (n: number, v6 = false): LeaseAttrs => ({
    publicIP: IP.parse(`192.168.88.${n}`)!,
    backendType: 'vxlan',
    vni: 1,
    vtepMAC: `0a:00:00:00:00:0${n}`,
    ...(v6 ? { publicIPv6: IP.parse(`fd88::${n}`)!, v6Vni: 1, v6VtepMAC: `0a:00:00:00:06:0${n}` } : {}),
  });

  it('network set writes flannel\'s JSON and prints it; network get prints it back', async () => {
    expect(await cli('network', 'set', '--network', '10.88.0.0/16', '--subnet-len', '26', '--vni', '7')).toBe(0);
    const json = '{"Network":"10.88.0.0/16","SubnetLen":26,"Backend":{"Type":"vxlan","VNI":7}}';
    expect(out).toBe(`${json}\n`);
    expect(readFileSync(join(dir, 'config'), 'utf8')).toBe(json);
    expect(await cli('network', 'get')).toBe(0);
    expect(out).toBe(`${json}\n`);
  });

  it('network set writes the vxlan backend\'s MTU, DirectRouting, GBP, Learning and EnableNFTables', async () => {
    expect(await cli('network', 'set', '--network', '10.88.0.0/16', '--mtu', '1400', '--direct-routing', '--gbp', '--learning', '--enable-nftables')).toBe(0);
    expect(readFileSync(join(dir, 'config'), 'utf8')).toBe(
      '{"Network":"10.88.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan","MTU":1400,"DirectRouting":true,"GBP":true,"Learning":true}}',
    );
    expect(await cli('network', 'set', '--network', '10.88.0.0/16', '--mtu', '100')).toBe(1);
    expect(err).toMatch(/--mtu must be an integer from 118 to 65535/);
  });

  it('network get without a config, and network set with contradicting flags, fail with one line and nothing written', async () => {
    expect(await cli('network', 'get')).toBe(1);
    expect(err).toBe(`vxlan-flannel: file store ${dir} has no network config\n`);
    expect(await cli('network', 'set', '--network', '10.88.0.0/16', '--ipv6-only', '--ipv6-network', 'fd88::/48')).toBe(1);
    expect(err).toBe('vxlan-flannel: --network and --ipv6-only cannot be given together\n');
    expect(await cli('network', 'set', '--network', '10.88.0.1/16')).toBe(1);
    expect(err).toMatch(/^vxlan-flannel: network config field "Network" 10.88.0.1\/16 has host bits set/);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('leases: a table of both families, then unreadable entries; --json has every field', async () => {
    const store = new FileStore(dir);
    await store.create({ subnet: Prefix.parse('10.88.1.0/24')! }, attrs(1), 0);
    await store.create({ subnet: Prefix.parse('10.88.2.0/24')!, ipv6Subnet: Prefix.parse('fd88:0:0:2::/64')! }, attrs(2, true), 600);
    await store.create({ subnet: Prefix.parse('10.88.3.0/24')! }, { ...attrs(3), backendType: 'vx\nlan' }, 0);
    writeFileSync(join(dir, 'subnets', '10.88.9.0-24'), 'not json\n');
    expect(await cli('leases')).toBe(0);
    const lines = out.split('\n');
    expect(lines[0]).toMatch(/^SUBNET +PUBLIC IP +BACKEND +VTEP MAC +EXPIRES$/);
    expect(lines[1]).toMatch(/^10\.88\.1\.0\/24 +192\.168\.88\.1 +vxlan +0a:00:00:00:00:01 +-$/);
    expect(lines[2]).toMatch(/^10\.88\.2\.0\/24,fd88:0:0:2::\/64 +192\.168\.88\.2,fd88::2 +vxlan +0a:00:00:00:00:02,0a:00:00:00:06:02 +\d{4}-\d\d-\d\dT/);
    expect(lines[3]).toMatch(/^10\.88\.3\.0\/24 +192\.168\.88\.3 +vx\\u000alan /); // a value from the store cannot make a line of its own
    expect(lines[4]).toMatch(/^unreadable "10.88.9.0-24": lease is not JSON: /);
    expect(lines.slice(5)).toEqual(['']);
    expect(await cli('leases', '--json')).toBe(0);
    const j = JSON.parse(out) as { leases: Record<string, unknown>[]; bad: { key: string }[] };
    expect(j.leases[1]).toEqual({
      subnet: '10.88.2.0/24',
      publicIP: '192.168.88.2',
      backendType: 'vxlan',
      vtepMAC: '0a:00:00:00:00:02',
      expiration: expect.stringMatching(/^\d{4}-/),
      ipv6Subnet: 'fd88:0:0:2::/64',
      publicIPv6: 'fd88::2',
      v6VtepMAC: '0a:00:00:00:06:02',
    });
    expect(j.bad.map((b) => b.key)).toEqual(['10.88.9.0-24']);
  });

  it('release removes the lease holding either subnet of a dual-stack lease; an unknown or malformed subnet is an error', async () => {
    const store = new FileStore(dir);
    await store.create({ subnet: Prefix.parse('10.88.2.0/24')!, ipv6Subnet: Prefix.parse('fd88:0:0:2::/64')! }, attrs(2, true), 600);
    await store.create({ subnet: Prefix.parse('10.88.4.0/24')! }, attrs(4), 600);
    expect(await cli('release', 'fd88:0:0:2::/64')).toBe(0);
    expect(readdirSync(join(dir, 'subnets'))).toEqual(['10.88.4.0-24']);
    expect(await cli('release', '10.88.77.0/24')).toBe(1);
    expect(err).toBe(`vxlan-flannel: no lease holds 10.88.77.0/24 in file store ${dir} (see \`vxlan-flannel leases\`)\n`);
    expect(readdirSync(join(dir, 'subnets'))).toEqual(['10.88.4.0-24']);
    expect(await cli('release', '10.88.4.1/24')).toBe(1);
    expect(err).toBe('vxlan-flannel: "10.88.4.1/24" is not a subnet like 10.244.3.0/24 or fd00:10:244:3::/64\n');
    expect(await cli('release', '10.88.4.0/24')).toBe(0);
    expect(readdirSync(join(dir, 'subnets'))).toEqual([]);
  });

  it('status without a lease on this node: the problem named, exit 1', async () => {
    await cli('network', 'set', '--network', '10.88.0.0/16');
    expect(await cli('status', '--subnet-file', join(dir, 'subnet.env'), '--json')).toBe(1);
    expect(JSON.parse(out)).toMatchObject({ store: `file store ${dir}`, problems: [`${join(dir, 'subnet.env')} does not exist: this node holds no lease`] });
  });

  it('release of an unreadable entry under exactly that subnet removes it', async () => {
    await cli('network', 'set', '--network', '10.88.0.0/16');
    writeFileSync(join(dir, 'subnets', '10.88.9.0-24'), 'not json');
    expect(await cli('release', '10.88.9.0/24')).toBe(0);
    expect(readdirSync(join(dir, 'subnets'))).toEqual([]);
  });

  it('the store commands refuse --kube-subnet-mgr, saying what to use instead, and change nothing', async () => {
    for (const args of [['network', 'set', '--network', '10.88.0.0/16'], ['network', 'get'], ['leases'], ['release', '10.88.4.0/24']]) {
      expect(await cli(...args, '--kube-subnet-mgr')).toBe(1);
      expect(err).toMatch(new RegExp(`^vxlan-flannel: \`vxlan-flannel ${args.slice(0, args[0] === 'network' ? 2 : 1).join(' ')}\` works on a lease store \\(etcd, the file store\\); with --kube-subnet-mgr the leases are the Nodes' pod CIDRs and annotations: use kubectl`));
    }
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('vxlan-flannel status --kube-subnet-mgr (the stand-in API server)', () => {
  let server: KubeApiServer;
  let dir: string;
  let out: string;

  beforeAll(async () => {
    server = await startKubeApiServer();
    dir = mkdtempSync(join(tmpdir(), 'flannel-cli-kube-'));
  });
  afterAll(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    out = '';
    vi.spyOn(process.stdout, 'write').mockImplementation((s) => ((out += String(s)), true));
    vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
  });
  afterEach(() => {
    vi.restoreAllMocks();
    process.exitCode = undefined;
  });

  it('shows this node\'s Node with its NetworkUnavailable condition, its lease read from the annotations, the Nodes it ignores and why', async () => {
    const P = 'flannel.alpha.coreos.com';
    const annotations = (octet: number) => ({
      [`${P}/kube-subnet-manager`]: 'true',
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: `{"VNI":1,"VtepMAC":"0a:00:00:00:00:0${octet}"}`,
      [`${P}/public-ip`]: `192.168.88.${octet}`,
    });
    await server.createNode({ metadata: { name: 'n1', annotations: annotations(1) }, spec: { podCIDR: '10.88.1.0/24' }, status: { conditions: [{ type: 'NetworkUnavailable', status: 'True', reason: 'NoRouteCreated' }] } });
    await server.createNode({ metadata: { name: 'n2', annotations: { ...annotations(2), [`${P}/backend-data`]: 'nope' } }, spec: { podCIDR: '10.88.2.0/24' } });
    writeFileSync(join(dir, 'net-conf.json'), '{"Network":"10.88.0.0/16","Backend":{"Type":"vxlan"}}');
    writeFileSync(join(dir, 'subnet.env'), 'FLANNEL_NETWORK=10.88.0.0/16\nFLANNEL_SUBNET=10.88.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n');
    const args = ['status', '--kube-subnet-mgr', '--kube-api-url', server.url, '--node-name', 'n1', '--net-config-path', join(dir, 'net-conf.json'), '--subnet-file', join(dir, 'subnet.env')];
    await main(['node', 'vxlan-flannel', ...args, '--json']);
    expect(process.exitCode).toBe(1);
    const report = JSON.parse(out);
    expect(report).toMatchObject({
      store: `Kubernetes API ${server.url}, node "n1"`,
      node: { name: 'n1', exists: true, networkUnavailable: { status: 'True', reason: 'NoRouteCreated' } },
      lease: { subnet: '10.88.1.0/24', inStore: true, publicIP: '192.168.88.1', vtepMAC: '0a:00:00:00:00:01' },
      ignored: [`nodes/n2: node "n2": annotation ${P}/backend-data is not JSON: "nope"`],
    });
    expect(report.problems[0]).toBe('node "n1" has NetworkUnavailable True (NoRouteCreated): no pod is scheduled on it');
    out = '';
    await main(['node', 'vxlan-flannel', ...args]);
    expect(out).toMatch(/^store: {3}Kubernetes API .*\nnode: {4}n1, NetworkUnavailable True \(NoRouteCreated\)\n/);
  });
});
