// The operator commands on the embedded file store (a temp directory): what
// they print, what they change, and their errors. The daemon command is run
// by the integration tests (it needs a node).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP, Prefix } from '../../src/net/ip';
import { main } from '../../src/cli/vxlan-flannel';
import { FileStore } from '../../src/flannel/file-store';
import type { LeaseAttrs } from '../../src/flannel/lease';

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
});
