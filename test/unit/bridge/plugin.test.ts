// The bridge plugin's logic against a model of ip/sysctl/iptables (no root;
// the host's sysctls are recorded by the fake kernel, never written):
// the command lines it sends, results, rollback, idempotent DEL, CHECK drift,
// GC, and config errors that must change nothing.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { handle } from '../../../src/cni/skel';
import { bridgePlugin } from '../../../src/bridge/plugin';
import { attachmentTags, hostVethName } from '../../../src/bridge/names';
import { FakeKernel } from '../../support/fake-kernel';
import { kernelError } from '../../../src/bridge/kernel-error';

let dir: string;
let netns: string;
let kernel: FakeKernel;

const IPAM_V4 = { cniVersion: '1.0.0', ips: [{ address: '10.77.9.5/24', gateway: '10.77.9.1' }], routes: [{ dst: '10.99.0.0/16' }], dns: { nameservers: ['10.77.9.53'] } };
const IPAM_DUAL = {
  cniVersion: '1.0.0',
  ips: [
    { address: '10.77.9.5/24', gateway: '10.77.9.1' },
    { address: 'fd77:9::5/64', gateway: 'fd77:9::1' },
  ],
};

function setIpamResult(r: unknown): void {
  writeFileSync(join(dir, 'ipam-result.json'), JSON.stringify(r));
}

const ipamLog = () => (existsSync(join(dir, 'ipam.log')) ? readFileSync(join(dir, 'ipam.log'), 'utf8').trim().split('\n') : []);

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'bridge-unit-'));
  netns = join(dir, 'netns-c1');
  writeFileSync(netns, '');
  writeFileSync(join(dir, 'netns-c2'), '');
  // A stand-in IPAM plugin: logs each call, prints the canned result on ADD.
  const script = join(dir, 'fake-ipam');
  writeFileSync(
    script,
    '#!/bin/sh\nd=$(dirname "$0")\necho "$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME" >> "$d/ipam.log"\n' +
      'if [ -f "$d/ipam-fail-$CNI_COMMAND" ]; then echo \'{"code":11,"msg":"pool busy"}\'; exit 1; fi\n' +
      'if [ "$CNI_COMMAND" = ADD ]; then cat "$d/ipam-result.json"; fi\n',
  );
  chmodSync(script, 0o755);
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

beforeEach(() => {
  kernel = new FakeKernel().install();
  rmSync(join(dir, 'ipam.log'), { force: true });
  setIpamResult(IPAM_V4);
});

afterEach(() => kernel.uninstall());

interface Call {
  command: string;
  conf: Record<string, unknown>;
  id?: string;
  ifname?: string;
  args?: string;
  ns?: string;
}

async function cni({ command, conf, id = 'c1', ifname = 'eth0', args, ns = netns }: Call) {
  const env: NodeJS.ProcessEnv = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: id,
    CNI_NETNS: ns,
    CNI_IFNAME: ifname,
    CNI_PATH: dir,
    PATH: process.env.PATH,
    ...(args ? { CNI_ARGS: args } : {}),
  };
  // What the plugin writes to stderr (its diagnostics, provoked here on purpose) is kept with the result, not printed.
  let stderr = '';
  const spy = vi.spyOn(process.stderr, 'write').mockImplementation((s) => ((stderr += String(s)), true));
  try {
    const out = await handle(bridgePlugin, env, () => JSON.stringify(conf));
    return { code: out.exitCode, json: out.stdout ? JSON.parse(out.stdout) : undefined, stderr };
  } finally {
    spy.mockRestore();
  }
}

/**
 * A small model of the masquerade firewall on the fake kernel's replies: the
 * nat table of both iptables families (iptables-save; iptables-restore
 * --noflush with -A/-D/-F/-X and chain declarations, all or nothing) and the
 * nftables chain of table inet cni_ts_masquerade (`nft -f -` scripts, all or
 * nothing; `nft -j list chain`). `before` runs ahead of each command (to
 * change the rules between a listing and a removal, as a concurrent DEL would).
 */
function fakeFirewall(k: FakeKernel) {
  type Family = 4 | 6;
  const ipt: Record<Family, { chains: Set<string>; rules: string[] }> = { 4: { chains: new Set(), rules: [] }, 6: { chains: new Set(), rules: [] } };
  const nft = { table: false, next: 1, rules: [] as { handle: number; text: string; comment: string; saddr: string; family: string }[] };
  const fw = { ipt, nft, before: undefined as ((argv0: string, input?: string) => void) | undefined };
  const fail = (stderr: string) => ({ code: 1, stdout: '', stderr });
  for (const f of [4, 6] as const) {
    const pre = f === 4 ? 'iptables' : 'ip6tables';
    k.replies.set(`${pre}-save`, () => {
      fw.before?.(`${pre}-save`);
      const t = ipt[f];
      return { code: 0, stderr: '', stdout: ['*nat', ':POSTROUTING ACCEPT [0:0]', ...[...t.chains].map((c) => `:${c} - [0:0]`), ...t.rules, 'COMMIT', ''].join('\n') };
    });
    k.replies.set(`${pre}-restore`, (r) => {
      fw.before?.(`${pre}-restore`, r.input);
      const chains = new Set(ipt[f].chains);
      let rules = [...ipt[f].rules];
      const lines = r.input!.split('\n');
      for (const [i, line] of lines.entries()) {
        const [op, chain, ...rest] = line.split(' ');
        const known = chain === 'POSTROUTING' || chains.has(chain);
        const bad = (why: string) => fail(`${pre}-restore: line ${i + 1} failed: ${why}\n`);
        if (line.startsWith(':')) chains.add(line.slice(1).split(' ')[0]);
        else if (op === '-A') {
          if (!known) return bad(`Chain '${chain}' does not exist`);
          rules.push(line);
        } else if (op === '-D') {
          const at = rules.indexOf(`-A ${chain} ${rest.join(' ')}`);
          if (at < 0) return bad('Bad rule (does a matching rule exist in that chain?)');
          rules.splice(at, 1);
        } else if (op === '-F') {
          if (!known) return bad(`Chain '${chain}' does not exist`);
          rules = rules.filter((x) => !x.startsWith(`-A ${chain} `));
        } else if (op === '-X') {
          if (!known) return bad(`Chain '${chain}' does not exist`);
          chains.delete(chain);
        }
      }
      ipt[f].chains = chains;
      ipt[f].rules = rules;
      return { code: 0, stdout: '', stderr: '' };
    });
  }
  k.replies.set('nft', (r) => {
    fw.before?.('nft', r.input);
    if (r.argv.includes('list')) {
      if (!nft.table) return fail('Error: No such file or directory\nlist chain inet cni_ts_masquerade postrouting\n');
      const rule = (x: (typeof nft.rules)[number]) => ({
        rule: { family: 'inet', table: 'cni_ts_masquerade', chain: 'postrouting', handle: x.handle, comment: x.comment, expr: [{ match: { op: '==', left: { payload: { protocol: x.family, field: 'saddr' } }, right: x.saddr } }] },
      });
      return { code: 0, stderr: '', stdout: JSON.stringify({ nftables: [{ metainfo: {} }, { chain: {} }, ...nft.rules.map(rule)] }) };
    }
    let table = nft.table;
    let rules = [...nft.rules];
    let next = nft.next;
    for (const line of (r.input ?? '').split('\n')) {
      if (!line.includes('cni_ts_masquerade')) continue; // other tables (the MAC spoof check) are not modelled
      if (line.startsWith('add table')) table = true;
      else if (line.startsWith('add rule')) {
        const m = /(ip6?) saddr (\S+) .*comment "([^"]*)"/.exec(line)!;
        rules.push({ handle: next++, text: line, comment: m[3], saddr: m[2], family: m[1] });
      } else if (line.startsWith('delete rule')) {
        const handle = Number(line.split(' ').pop());
        if (!rules.some((x) => x.handle === handle)) return fail(`Error: Could not process rule: No such file or directory\n${line}\n`);
        rules = rules.filter((x) => x.handle !== handle);
      }
    }
    Object.assign(nft, { table, rules, next });
    return { code: 0, stdout: '', stderr: '' };
  });
  return fw;
}

/** Tagged masquerade rules the model holds, per backend. */
function taggedRules(fw: ReturnType<typeof fakeFirewall>) {
  return {
    iptables: [...fw.ipt[4].rules, ...fw.ipt[6].rules].filter((r) => r.includes('cni-ts:')),
    nftables: fw.nft.rules.map((r) => r.comment),
  };
}

const base = (extra: Record<string, unknown> = {}) => ({
  cniVersion: '1.0.0',
  name: 'unitnet',
  type: 'bridge',
  bridge: 'brunit0',
  isGateway: true,
  ipam: { type: 'fake-ipam' },
  ...extra,
});

describe('ADD', () => {
  // The speed contract: the processes an ADD costs (two host batches, one sysctl, one container batch).
  // The other tests check the state the fake kernel ends in, not the order of the lines that made it.
  it('builds bridge, veth and container config in one host batch (two steps), one sysctl and one container batch', async () => {
    const r = await cni({ command: 'ADD', conf: base({ isDefaultGateway: true, mtu: 1400 }) });
    expect(r.code).toBe(0);
    const veth = hostVethName('c1', 'eth0');
    expect(r.json.interfaces).toEqual([
      { name: 'brunit0', mac: expect.stringMatching(/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/) },
      { name: veth, mac: expect.any(String) },
      { name: 'eth0', mac: expect.any(String), sandbox: netns },
    ]);
    expect(r.json.ips).toEqual([{ address: '10.77.9.5/24', gateway: '10.77.9.1', interface: 2 }]);
    expect(r.json.routes).toEqual([{ dst: '10.99.0.0/16' }, { dst: '0.0.0.0/0', gw: '10.77.9.1' }]);
    expect(r.json.dns).toEqual({ nameservers: ['10.77.9.53'] });

    const ipCalls = kernel.calls.filter((c) => c.argv[0] === 'ip');
    // Two host batches (create the bridge and read what the name holds; then the rest), one in the container.
    expect(ipCalls.map((c) => c.netns ?? 'host')).toEqual(['host', 'host', netns]);
    expect(ipCalls[0].input!.trim().split('\n')).toEqual([expect.stringMatching(/^link add name brunit0 mtu 1400 address \S+ type bridge$/), 'addr show dev brunit0']);
    expect(kernel.calls.filter((c) => c.argv[0] === 'sysctl')).toHaveLength(1);
    const host = kernel.ipLines().filter((l) => l.netns === '').map((l) => l.line);
    expect(host).toContain(`link add name ${veth} mtu 1400 master brunit0 up type veth peer name eth0 mtu 1400 netns ${netns}`);
    // the alias GC finds the veth by: the attachment's tags, as in its masquerade rules
    const tags = attachmentTags('unitnet', 'c1', 'eth0');
    expect(host).toContain(`link set dev ${veth} alias cni-ts:${tags.netTag}:${tags.attTag}`);
    expect(host.some((l) => /^link add name brunit0 mtu 1400 address \S+ type bridge$/.test(l))).toBe(true);
    expect(host).toContain('addr replace 10.77.9.1/24 dev brunit0 broadcast +');
    // the container side as the kernel has it now
    const eth0 = kernel.links(netns).get('eth0')!;
    expect([eth0.up, eth0.mtu, eth0.addrs.map((a) => `${a.local}/${a.prefixlen}`)]).toEqual([true, 1400, ['10.77.9.5/24']]);
    expect(kernel.routesIn(netns)).toEqual(expect.arrayContaining([
      { dst: '10.99.0.0/16', gateway: '10.77.9.1', dev: 'eth0' },
      { dst: 'default', gateway: '10.77.9.1', dev: 'eth0' },
    ]));
    expect(kernel.routesIn(netns)).toHaveLength(2);
    expect(kernel.sysctls[0]).toEqual({ netns, settings: ['net/ipv6/conf/eth0/accept_dad=0', 'net/ipv4/conf/eth0/arp_notify=1'] });
    expect(ipamLog()).toEqual(['ADD c1 eth0']);
  });

  it('enables IPv6 on the interface and lo for an IPv6 address; dual-stack gets a gateway per family', async () => {
    setIpamResult(IPAM_DUAL);
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.code).toBe(0);
    expect(r.json.ips.map((i: { interface: number }) => i.interface)).toEqual([2, 2]);
    expect(kernel.sysctls[0].settings).toEqual(
      expect.arrayContaining(['net/ipv6/conf/lo/disable_ipv6=0', 'net/ipv6/conf/eth0/disable_ipv6=0']),
    );
    const host = kernel.ipLines().filter((l) => l.netns === '').map((l) => l.line);
    expect(host).toEqual(expect.arrayContaining(['addr replace 10.77.9.1/24 dev brunit0 broadcast +', 'addr replace fd77:9::1/64 dev brunit0 nodad']));
    const cont = kernel.ipLines().filter((l) => l.netns === netns).map((l) => l.line);
    expect(cont).toEqual(expect.arrayContaining(['addr add 10.77.9.5/24 dev eth0 broadcast +', 'addr add fd77:9::5/64 dev eth0']));
    expect(kernel.hostSysctls).toEqual(expect.arrayContaining(['net/ipv4/ip_forward=1', 'net/ipv6/conf/all/forwarding=1']));
  });

  it('computes the gateway when the IPAM gives none, and prints older result versions', async () => {
    setIpamResult({ cniVersion: '0.4.0', ips: [{ version: '4', address: '10.77.9.5/24' }] });
    const r = await cni({ command: 'ADD', conf: base({ cniVersion: '0.4.0' }) });
    expect(r.code).toBe(0);
    expect(r.json.ips).toEqual([{ version: '4', address: '10.77.9.5/24', gateway: '10.77.9.1', interface: 2 }]);
  });

  it('L2 only without ipam: no sysctl, no addresses, the container link up', async () => {
    const r = await cni({ command: 'ADD', conf: base({ ipam: undefined, isGateway: false }) });
    expect(r.code).toBe(0);
    expect(r.json.ips).toBeUndefined();
    expect(kernel.sysctls).toHaveLength(0);
    const eth0 = kernel.links(netns).get('eth0')!;
    expect([eth0.up, eth0.addrs, kernel.routesIn(netns)]).toEqual([true, [], []]);
  });

  it('disableContainerInterface leaves the container side down', async () => {
    const r = await cni({ command: 'ADD', conf: base({ ipam: {}, isGateway: false, disableContainerInterface: true }) });
    expect(r.code).toBe(0);
    const eth0 = kernel.links(netns).get('eth0')!;
    expect([eth0.up, eth0.addrs, kernel.routesIn(netns)]).toEqual([false, [], []]);
  });

  it('sets port flags, promiscuous mode and the MAC from runtimeConfig over args and CNI_ARGS', async () => {
    const r = await cni({
      command: 'ADD',
      conf: base({ hairpinMode: true, portIsolation: true, runtimeConfig: { mac: '02:AA:BB:CC:DD:01' }, args: { cni: { mac: '02:aa:bb:cc:dd:02' } } }),
      args: 'MAC=02:aa:bb:cc:dd:03',
    });
    expect(r.code).toBe(0);
    const host = kernel.ipLines().map((l) => l.line);
    const veth = hostVethName('c1', 'eth0');
    expect(host).toContain(`link set dev ${veth} type bridge_slave hairpin on isolated on`);
    expect(host.find((l) => l.includes('type veth'))).toContain('peer name eth0 address 02:aa:bb:cc:dd:01 netns');
    expect(r.json.interfaces[2].mac).toBe('02:aa:bb:cc:dd:01');
    kernel.uninstall();
    kernel = new FakeKernel().install();
    const r2 = await cni({ command: 'ADD', conf: base({ promiscMode: true }), args: 'MAC=02:aa:bb:cc:dd:03' });
    expect(r2.code).toBe(0);
    expect(kernel.ipLines().map((l) => l.line)).toContain('link set dev brunit0 promisc on up');
    expect(r2.json.interfaces[2].mac).toBe('02:aa:bb:cc:dd:03');
  });

  it('undoes everything when a later step fails: veth deleted, IPAM released', async () => {
    kernel.failures.push({ match: 'route append 10.99.0.0/16', msg: 'Error: Nexthop has invalid gateway.', netns });
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.code).toBe(1);
    expect(r.json.code).toBe(999);
    expect(r.json.msg).toContain('route append 10.99.0.0/16 via 10.77.9.1 dev eth0');
    expect(r.json.msg).toContain('Nexthop has invalid gateway');
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);
    expect(kernel.links(netns).has('eth0')).toBe(false);
    expect(kernel.links('').has('brunit0')).toBe(true); // never deleted
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('a step failing stops the ADD there (the steps run one after another), and everything made before it is undone', async () => {
    const fw = fakeFirewall(kernel);
    kernel.failures.push({ match: 'net/ipv4/ip_forward=', msg: 'EROFS: read-only file system, open /proc/sys/net/ipv4/ip_forward', netns: '' });
    const r = await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: 'iptables' }) });
    expect(r.json).toMatchObject({ code: 5, msg: expect.stringMatching(/failed to enable forwarding: EROFS/) });
    // nothing after the failing step ran: no container batch, no masquerade
    expect(kernel.calls.filter((c) => c.netns === netns)).toEqual([]);
    expect(kernel.calls.filter((c) => c.argv[0].endsWith('tables-restore') && c.input?.includes('-A '))).toEqual([]);
    // what came before it is undone
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);
    expect(kernel.links(netns).has('eth0')).toBe(false);
    expect(taggedRules(fw)).toEqual({ iptables: [], nftables: [] });
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('keeps the addresses of an attachment that already exists', async () => {
    expect((await cni({ command: 'ADD', conf: base() })).code).toBe(0);
    const again = await cni({ command: 'ADD', conf: base() });
    expect(again.code).toBe(1);
    expect(again.json.msg).toMatch(/already exists: this attachment/);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'ADD c1 eth0']);
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(true);
  });

  it('reports an interface name taken in the container', async () => {
    kernel.links(netns).set('eth0', { name: 'eth0', kind: 'dummy', ifindex: 1, mtu: 1500, mac: '02:00:00:00:01:01', up: true, promisc: false, addrs: [], slave: {}, bridge: {} });
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.code).toBe(1);
    expect(r.json.msg).toContain('an interface named eth0 (CNI_IFNAME) already exists');
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('refuses a bridge name taken by another kind of link, and leaves that link untouched', async () => {
    const uplink = { ifindex: 7, name: 'brunit0', kind: 'dummy', mtu: 1500, mac: '02:00:00:00:00:99', up: false, promisc: false, addrs: [], slave: {}, bridge: {} };
    kernel.links('').set('brunit0', { ...uplink, addrs: [] });
    const r = await cni({ command: 'ADD', conf: base({ promiscMode: true, vlan: 7 }) });
    expect(r.code).toBe(1);
    expect(r.json.code).toBe(7);
    expect(r.json.msg).toMatch(/"brunit0" \(field "bridge"\) already exists but is not a bridge \(it is a dummy\)/);
    expect([...kernel.links('').keys()]).toEqual(['brunit0']);
    // Not brought up, not promiscuous, no gateway address: only the bridge creation (refused) and reads ran.
    expect(kernel.links('').get('brunit0')).toEqual(uplink);
    expect(kernel.ipLines().map((l) => l.line)).toEqual([
      expect.stringMatching(/^link add name brunit0 address \S+ type bridge$/),
      'addr show dev brunit0',
      'addr show dev brunit0.7',
    ]);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('refuses a different address on the bridge unless forceAddress', async () => {
    kernel.links('').set('brunit0', {
      ifindex: 7, name: 'brunit0', kind: 'bridge', mtu: 1500, mac: '02:00:00:00:00:98', up: true, promisc: false,
      addrs: [{ local: '10.77.9.254', prefixlen: 24, family: 'inet' }], slave: {}, bridge: {},
    });
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.code).toBe(1);
    expect(r.json.code).toBe(7);
    expect(r.json.msg).toContain('already has an IP address different from 10.77.9.1/24: 10.77.9.254/24');
    expect(kernel.links('').get('brunit0')!.addrs.map((a) => a.local)).toEqual(['10.77.9.254']);
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);

    const forced = await cni({ command: 'ADD', conf: base({ forceAddress: true }) });
    expect(forced.code).toBe(0);
    expect(kernel.links('').get('brunit0')!.addrs.map((a) => a.local)).toEqual(['10.77.9.1']);
  });

  it('allows other IPv6 subnets on the bridge', async () => {
    setIpamResult(IPAM_DUAL);
    kernel.links('').set('brunit0', {
      ifindex: 7, name: 'brunit0', kind: 'bridge', mtu: 1500, mac: '02:00:00:00:00:97', up: true, promisc: false,
      addrs: [{ local: 'fd00:1::1', prefixlen: 64, family: 'inet6' }, { local: '10.77.9.1', prefixlen: 24, family: 'inet' }], slave: {}, bridge: {},
    });
    expect((await cni({ command: 'ADD', conf: base() })).code).toBe(0);
  });

  it('waits for IPv6 DAD with enabledad, then adds routes; DADFAILED is a clear error', async () => {
    setIpamResult({ cniVersion: '1.0.0', ips: [{ address: 'fd77:9::5/64', gateway: 'fd77:9::1' }], routes: [{ dst: '::/0' }] });
    kernel.dad.set('fd77:9::5', { shows: 2 });
    const ok = await cni({ command: 'ADD', conf: base({ enabledad: true }) });
    expect(ok.code).toBe(0);
    expect(kernel.sysctls[0].settings).toEqual(expect.arrayContaining(['net/ipv6/conf/eth0/enhanced_dad=1', 'net/ipv6/conf/eth0/accept_dad=1']));
    const cont = kernel.ipLines().filter((l) => l.netns === netns).map((l) => l.line);
    expect(cont.filter((l) => l === 'addr show dev eth0').length).toBeGreaterThanOrEqual(3);
    expect(cont[cont.length - 1]).toBe('route append ::/0 via fd77:9::1 dev eth0');

    kernel.uninstall();
    kernel = new FakeKernel().install();
    rmSync(join(dir, 'ipam.log'), { force: true });
    kernel.dad.set('fd77:9::5', { failed: true, shows: 0 });
    const bad = await cni({ command: 'ADD', conf: base({ enabledad: true }) });
    expect(bad.code).toBe(1);
    expect(bad.json.msg).toMatch(/duplicate address detection failed on eth0 for fd77:9::5\/64 \(DADFAILED\)/);
    expect(bad.stderr).toMatch(/^bridge: IPv6 duplicate address detection failed on eth0/);
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('VLAN: filtering on the bridge, default VLAN removed, access VLAN untagged; gateway on <bridge>.<vlan>', async () => {
    const r = await cni({ command: 'ADD', conf: base({ vlan: 42 }) });
    expect(r.code).toBe(0);
    const host = kernel.ipLines().filter((l) => l.netns === '').map((l) => l.line);
    expect(host.some((l) => /^link add name brunit0 address \S+ type bridge$/.test(l))).toBe(true);
    expect(host).toContain('link set dev brunit0 type bridge vlan_filtering 1');
    expect(host).toContain('addr replace 10.77.9.1/24 dev brunit0.42 broadcast +');
    const br = kernel.calls.filter((c) => c.argv[0] === 'bridge').map((c) => c.input!.trim());
    const veth = hostVethName('c1', 'eth0');
    expect(br).toHaveLength(1);
    expect(br[0].split('\n')).toEqual(
      expect.arrayContaining([`vlan del dev ${veth} vid 1`, `vlan add dev ${veth} vid 42 pvid untagged`]),
    );
    expect(r.json.interfaces.map((i: { name: string }) => i.name)).toEqual(['brunit0', veth, 'eth0', 'brunit0.42']);
  });

  it('VLAN gateway: a failure after its veth pair was made removes the pair (and the address on it)', async () => {
    kernel.failures.push({ match: 'type bridge vlan_filtering 1', msg: 'RTNETLINK answers: Operation not supported' });
    const r = await cni({ command: 'ADD', conf: base({ vlan: 42 }) });
    expect(r.code).toBe(1);
    expect(r.json.msg).toMatch(/vlan_filtering 1: RTNETLINK answers: Operation not supported.*CONFIG_BRIDGE_VLAN_FILTERING/);
    expect([...kernel.links('').keys()]).toEqual(['brunit0']);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);

    // Later in the ADD too (here the VLANs of the ports).
    kernel.failures.length = 0;
    kernel.replies.set('bridge', () => ({ code: 1, stdout: '', stderr: 'RTNETLINK answers: Operation not supported\nCommand failed -:2\n' }));
    const later = await cni({ command: 'ADD', conf: base({ vlan: 42 }) });
    expect(later.json.msg).toMatch(/failed to set up VLANs/);
    expect([...kernel.links('').keys()]).toEqual(['brunit0']);
  });

  it('VLAN gateway: its port gets its VLANs on every ADD, not only when created', async () => {
    expect((await cni({ command: 'ADD', conf: base({ vlan: 42 }) })).code).toBe(0);
    expect((await cni({ command: 'ADD', conf: base({ vlan: 42 }), id: 'c2', ns: join(dir, 'netns-c2') })).code).toBe(0);
    const gwPort = [...kernel.links('').values()].find((l) => l.peer?.name === 'brunit0.42')!.name;
    const second = kernel.calls.filter((c) => c.argv[0] === 'bridge')[1].input!.trim().split('\n');
    expect(second).toEqual(expect.arrayContaining([`vlan del dev ${gwPort} vid 1`, `vlan add dev ${gwPort} vid 42 pvid untagged`]));
  });

  it('VLAN trunk: ranges, default VLAN kept with preserveDefaultVlan', async () => {
    const r = await cni({ command: 'ADD', conf: base({ vlanTrunk: [{ minID: 10, maxID: 12 }, { id: 20 }, { id: 11 }], preserveDefaultVlan: true }) });
    expect(r.code).toBe(0);
    const br = kernel.calls.filter((c) => c.argv[0] === 'bridge').map((c) => c.input!.trim().split('\n'));
    const veth = hostVethName('c1', 'eth0');
    expect(br[0]).toEqual([`vlan add dev ${veth} vid 10-12`, `vlan add dev ${veth} vid 20`]);
  });

  it('ipMasq: one iptables-restore per family, rules tagged by network and attachment', async () => {
    setIpamResult(IPAM_DUAL);
    const r = await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: 'iptables' }) });
    expect(r.code).toBe(0);
    const restores = kernel.calls.filter((c) => c.argv[0].endsWith('tables-restore'));
    expect(restores.map((c) => c.argv[0]).sort()).toEqual(['ip6tables-restore', 'iptables-restore']);
    const v4 = restores.find((c) => c.argv[0] === 'iptables-restore')!.input!;
    const { attTag, netTag } = attachmentTags('unitnet', 'c1', 'eth0');
    expect(v4).toContain(`-A POSTROUTING -s 10.77.9.5/32 -m comment --comment "cni-ts:${netTag}:${attTag} net=unitnet id=c1 if=eth0" -j CNI-BR-${attTag}`);
    expect(v4).toContain(`-A CNI-BR-${attTag} ! -d 224.0.0.0/4`);
  });

  it('macspoofchk: one nft call that allows only the container MAC on its port', async () => {
    const r = await cni({ command: 'ADD', conf: base({ macspoofchk: true }) });
    expect(r.code).toBe(0);
    const nft = kernel.calls.filter((c) => c.argv[0] === 'nft');
    expect(nft).toHaveLength(1);
    const mac = r.json.interfaces[2].mac;
    expect(nft[0].input).toContain(`ether saddr ${mac} return`);
    expect(nft[0].input).toContain(`"${hostVethName('c1', 'eth0')}" : jump port-`);
  });
});

describe('ADD in a named namespace (a file under ip\'s run directory, as /run/netns/NAME)', () => {
  beforeEach(() => {
    kernel.uninstall();
    kernel = new FakeKernel().install({ netnsRunDir: dir });
  });

  const CONTAINER_LINES = ['addr add 10.77.9.5/24 dev eth0 broadcast +', 'link set dev eth0 up', 'route append 10.99.0.0/16 via 10.77.9.1 dev eth0', 'addr show dev eth0'];

  it('sets the sysctls and configures the container in one ip process: no nsenter, no sysctl process', async () => {
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.code).toBe(0);
    expect(kernel.calls.map((c) => c.argv[0])).toEqual(['ip', 'ip', 'ip']);
    const cont = kernel.calls[2];
    expect(cont.netns).toBe(netns);
    // Without -force: ip stops at the first failing line, so a forked child that could not enter cannot run the rest.
    expect(cont.argv).toEqual(['ip', '-json', '-details', '-batch', '-']);
    expect(cont.input!.trim().split('\n')).toEqual(['netns exec netns-c1 sysctl -q -e -w net/ipv6/conf/eth0/accept_dad=0 net/ipv4/conf/eth0/arp_notify=1', ...CONTAINER_LINES]);
    expect(kernel.sysctls).toEqual([{ netns, settings: ['net/ipv6/conf/eth0/accept_dad=0', 'net/ipv4/conf/eth0/arp_notify=1'] }]);
    expect(r.json.interfaces[2]).toEqual({ name: 'eth0', mac: expect.any(String), sandbox: netns });
  });

  it('a sysctl that cannot be set stops the batch and undoes everything', async () => {
    kernel.failures.push({ match: 'netns exec', msg: 'sysctl: permission denied on key "net.ipv4.conf.eth0.arp_notify"', netns });
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.json).toMatchObject({ code: 999, msg: expect.stringMatching(/configuring eth0 in .*netns-c1: ip netns exec netns-c1 sysctl .*permission denied/) });
    expect(kernel.links(netns).get('eth0')).toBeUndefined();
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('a failing line stops the batch there; the error names it and everything is undone', async () => {
    kernel.failures.push({ match: 'link set dev eth0 up', msg: 'RTNETLINK answers: No buffer space available', netns });
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.json).toMatchObject({ code: 999, msg: expect.stringMatching(/ip link set dev eth0 up: RTNETLINK answers: No buffer space available/) });
    expect(kernel.routes.get(netns) ?? []).toEqual([]); // the route line after it never ran
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0']);
  });

  it('where ip may not enter namespaces itself (no mount rights), nsenter and a sysctl process do it, from then on', async () => {
    kernel.ipCannotEnter = true;
    const r = await cni({ command: 'ADD', conf: base() });
    expect(r.code).toBe(0);
    const ns = kernel.calls.slice(2).map((c) => c.argv.slice(0, 2).join(' '));
    expect(ns).toEqual(['ip -n', 'sysctl -q', 'ip -json']);
    expect(kernel.calls.slice(3).every((c) => c.netns === netns)).toBe(true);
    expect(kernel.ipLines().filter((l) => l.netns === netns).map((l) => l.line)).toEqual(CONTAINER_LINES);
    expect(kernel.sysctls).toEqual([{ netns, settings: ['net/ipv6/conf/eth0/accept_dad=0', 'net/ipv4/conf/eth0/arp_notify=1'] }]);
    // The next call does not try ip -n again.
    kernel.calls.length = 0;
    expect((await cni({ command: 'DEL', conf: base(), id: 'other' })).code).toBe(0);
    expect((await cni({ command: 'ADD', conf: base(), id: 'c2' })).code).toBe(0);
    expect(kernel.calls.filter((c) => c.argv[1] === '-n')).toEqual([]);
  });
});

describe('kernelError', () => {
  it('names a tool that is not installed, from a sync or an async spawn', () => {
    for (const syscall of ['spawnSync ip', 'spawn ip']) {
      const e = Object.assign(new Error(`${syscall} ENOENT`), { code: 'ENOENT', syscall });
      expect(kernelError('configuring eth0', e).message).toBe('configuring eth0: ip is not installed (not found in PATH)');
    }
  });
});

describe('config errors change nothing', () => {
  const cases: [string, Record<string, unknown>, number, RegExp][] = [
    ['mtu out of range', { mtu: 70000 }, 7, /field "mtu"/],
    ['mtu below the minimum', { mtu: 10 }, 7, /field "mtu" must be 0 \(the default\) or from 68/],
    ['mtu not a number', { mtu: '1500' }, 7, /field "mtu"/],
    ['vlan out of range', { vlan: 4095 }, 7, /field "vlan"/],
    ['vlan and vlanTrunk', { vlan: 5, vlanTrunk: [{ id: 6 }] }, 7, /"vlan" and "vlanTrunk"/],
    ['vlanTrunk minID without maxID', { vlanTrunk: [{ minID: 6 }] }, 7, /vlanTrunk\[0\].*"minID" and "maxID"/],
    ['vlanTrunk id 0', { vlanTrunk: [{ id: 0 }] }, 7, /field "vlanTrunk\[0\]\.id"/],
    ['promisc with hairpin', { promiscMode: true, hairpinMode: true }, 7, /"hairpinMode" and "promiscMode"/],
    ['unknown ipMasqBackend', { ipMasq: true, ipMasqBackend: 'pf' }, 7, /field "ipMasqBackend" must be "iptables" or "nftables"/],
    ['ipam plugin missing', { ipam: { type: 'no-such-ipam' } }, 7, /plugin "no-such-ipam" \(field "ipam.type"\) not found in CNI_PATH/],
    ['bridge name too long', { bridge: 'a-very-long-bridge-name' }, 7, /field "bridge".*longer than 15 bytes/],
    ['bridge name with #', { bridge: 'br#0' }, 7, /field "bridge"/],
    ['bridge name with NUL', { bridge: 'br0\u0000x' }, 7, /field "bridge" "br0\\u0000x" is not a valid link name: it contains a control character/],
    ['bridge name with a control character', { bridge: 'br\u0007' }, 7, /field "bridge" .* control character/],
    ['bridge name template with %', { bridge: 'rvb%d' }, 7, /field "bridge" "rvb%d" is not a valid link name: it contains '%'/],
    ['isGateway bool', { isGateway: 'yes' }, 7, /field "isGateway" must be true or false/],
    ['bad runtimeConfig.mac', { runtimeConfig: { mac: '01:00:5e:00:00:01' } }, 7, /field "runtimeConfig.mac"/],
    ['dns nameservers not strings', { dns: { nameservers: [1] } }, 7, /field "dns.nameservers\[0\]"/],
    ['disableContainerInterface with IPAM', { disableContainerInterface: true }, 7, /"disableContainerInterface" cannot be used with IPAM/],
    ['VLAN gateway name too long', { bridge: 'bridge-name-15c', vlan: 100 }, 7, /longer than 15 bytes/],
  ];
  for (const [what, extra, code, msg] of cases) {
    it(what, async () => {
      const r = await cni({ command: 'ADD', conf: base(extra) });
      expect(r.code).toBe(1);
      expect(r.json.code).toBe(code);
      expect(r.json.msg).toMatch(msg);
      expect(kernel.calls).toHaveLength(0);
      expect(ipamLog()).toEqual([]);
    });
  }

  it('an L2-only attachment cannot be described in cniVersion 0.2.0: refused before anything is made', async () => {
    const r = await cni({ command: 'ADD', conf: base({ cniVersion: '0.2.0', ipam: undefined }) });
    expect(r.json).toMatchObject({ code: 1 });
    expect(r.json.msg).toMatch(/L2-only/);
    expect(kernel.calls).toHaveLength(0);
  });

  it('a bad CNI_ARGS MAC is an environment error', async () => {
    const r = await cni({ command: 'ADD', conf: base(), args: 'MAC=zz' });
    expect(r.json.code).toBe(4);
    expect(r.json.msg).toMatch(/CNI_ARGS MAC/);
    expect(kernel.calls).toHaveLength(0);
  });

  it('a CNI_IFNAME with % (a kernel name template) is an environment error naming it', async () => {
    for (const command of ['ADD', 'CHECK']) {
      const r = await cni({ command, conf: { ...base(), prevResult: {} }, ifname: 'eth%d' });
      expect(r.json.code, command).toBe(4);
      expect(r.json.msg).toMatch(/^CNI_IFNAME "eth%d" is invalid: it contains '%'/);
    }
    expect(kernel.calls).toHaveLength(0);
    expect(ipamLog()).toEqual([]);
  });

  it('a missing CNI_NETNS path is an environment error', async () => {
    const r = await cni({ command: 'ADD', conf: base(), ns: join(dir, 'gone') });
    expect(r.json.code).toBe(4);
    expect(kernel.calls).toHaveLength(0);
  });

  it('an IPAM failure is passed on with its code and nothing is created', async () => {
    writeFileSync(join(dir, 'ipam-fail-ADD'), '');
    try {
      const r = await cni({ command: 'ADD', conf: base() });
      expect(r.json).toMatchObject({ code: 11, msg: 'fake-ipam: pool busy' });
      expect(kernel.calls).toHaveLength(0);
    } finally {
      rmSync(join(dir, 'ipam-fail-ADD'));
    }
  });
});

describe('DEL', () => {
  it('removes the host veth by name and releases IPAM; a second DEL succeeds too', async () => {
    expect((await cni({ command: 'ADD', conf: base() })).code).toBe(0);
    const veth = hostVethName('c1', 'eth0');
    expect((await cni({ command: 'DEL', conf: base() })).code).toBe(0);
    expect(kernel.links('').has(veth)).toBe(false);
    expect(kernel.links(netns).has('eth0')).toBe(false);
    expect(kernel.links('').has('brunit0')).toBe(true);
    expect((await cni({ command: 'DEL', conf: base() })).code).toBe(0);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'DEL c1 eth0', 'DEL c1 eth0']);
  });

  it('falls back to CNI_IFNAME inside the namespace when the host end has another name', async () => {
    kernel.links(netns).set('eth0', { ifindex: 3, name: 'eth0', kind: 'veth', mtu: 1500, mac: '02:00:00:00:00:33', up: true, promisc: false, addrs: [], slave: {}, bridge: {} });
    expect((await cni({ command: 'DEL', conf: base() })).code).toBe(0);
    expect(kernel.links(netns).has('eth0')).toBe(false);
  });

  it('removes the links even when the IPAM plugin has gone from CNI_PATH, then reports it', async () => {
    expect((await cni({ command: 'ADD', conf: base() })).code).toBe(0);
    const r = await cni({ command: 'DEL', conf: base({ ipam: { type: 'gone-ipam' } }) });
    expect(r.json).toMatchObject({ code: 7 });
    expect(r.json.msg).toMatch(/gone-ipam/);
    expect(kernel.links('').has(hostVethName('c1', 'eth0'))).toBe(false);
  });

  it('works without CNI_NETNS and with a config that no longer validates', async () => {
    const r = await cni({ command: 'DEL', conf: base({ mtu: -1, vlan: 9999 }), ns: '' });
    expect(r.code).toBe(0);
    expect(ipamLog()).toEqual(['DEL c1 eth0']);
  });

  it('removes masquerade rules found by their tag, without knowing the addresses', async () => {
    const { attTag, netTag } = attachmentTags('unitnet', 'c1', 'eth0');
    const c = `-m comment --comment "cni-ts:${netTag}:${attTag} net=unitnet id=c1 if=eth0"`;
    kernel.replies.set('iptables-save', () => ({
      code: 0,
      stderr: '',
      stdout: [
        '*nat',
        ':POSTROUTING ACCEPT [0:0]',
        `:CNI-BR-${attTag} - [0:0]`,
        `-A POSTROUTING -s 10.77.9.5/32 ${c} -j CNI-BR-${attTag}`,
        `-A POSTROUTING -s 10.77.9.6/32 -m comment --comment "cni-ts:${netTag}:00000000000000000000 x" -j CNI-BR-00000000000000000000`,
        `-A CNI-BR-${attTag} -d 10.77.9.0/24 ${c} -j ACCEPT`,
        `-A CNI-BR-${attTag} ! -d 224.0.0.0/4 ${c} -j MASQUERADE`,
        'COMMIT',
      ].join('\n'),
    }));
    expect((await cni({ command: 'DEL', conf: base({ ipMasq: true, ipMasqBackend: 'iptables' }), ns: '' })).code).toBe(0);
    const restore = kernel.calls.filter((x) => x.argv[0] === 'iptables-restore');
    expect(restore).toHaveLength(1);
    expect(restore[0].argv).toEqual(['iptables-restore', '-w', '--noflush']);
    expect(restore[0].input!.trim().split('\n')).toEqual([
      '*nat',
      `-D POSTROUTING -s 10.77.9.5/32 ${c} -j CNI-BR-${attTag}`,
      `-F CNI-BR-${attTag}`,
      `-X CNI-BR-${attTag}`,
      'COMMIT',
    ]);
    expect(kernel.calls.filter((x) => x.argv[0] === 'ip6tables-restore')).toHaveLength(0);
  });
});

describe('DEL and GC of masquerade rules, whichever backend installed them', () => {
  it('DEL removes the attachment\'s rules from both backends, whatever ipMasqBackend says now (even an invalid one)', async () => {
    setIpamResult(IPAM_DUAL);
    const fw = fakeFirewall(kernel);
    // c1 added with iptables, c2 with nftables (a host that switched backends).
    expect((await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: 'iptables' }) })).code).toBe(0);
    expect((await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: 'nftables' }), id: 'c2', ns: join(dir, 'netns-c2') })).code).toBe(0);
    const { attTag: a1 } = attachmentTags('unitnet', 'c1', 'eth0');
    const { attTag: a2 } = attachmentTags('unitnet', 'c2', 'eth0');
    expect(taggedRules(fw).iptables.every((r) => r.includes(a1))).toBe(true);
    expect(taggedRules(fw).nftables).toHaveLength(2);

    const d1 = await cni({ command: 'DEL', conf: base({ ipMasq: true, ipMasqBackend: 'nftables' }) });
    expect(d1.code, JSON.stringify(d1.json)).toBe(0);
    expect(taggedRules(fw).iptables).toEqual([]);
    expect(fw.ipt[4].chains.size + fw.ipt[6].chains.size).toBe(0);
    expect(taggedRules(fw).nftables.every((c) => c.includes(a2))).toBe(true);

    const d2 = await cni({ command: 'DEL', conf: base({ ipMasq: true, ipMasqBackend: 'pf' }), id: 'c2', ns: '' });
    expect(d2.code, JSON.stringify(d2.json)).toBe(0);
    expect(taggedRules(fw)).toEqual({ iptables: [], nftables: [] });
  });

  it('DEL does not mind a backend whose tool is missing or that has no table', async () => {
    const notInstalled = (argv0: string) => () => {
      throw Object.assign(new Error(`spawnSync ${argv0} ENOENT`), { code: 'ENOENT', syscall: `spawnSync ${argv0}` });
    };
    kernel.replies.set('iptables-save', () => ({ code: 1, stdout: '', stderr: 'iptables-save v1.8.9 (legacy): Table does not exist (do you need to insmod?)\n' }));
    kernel.replies.set('ip6tables-save', notInstalled('ip6tables-save'));
    kernel.replies.set('nft', notInstalled('nft'));
    for (const ipMasqBackend of ['iptables', 'nftables']) {
      const r = await cni({ command: 'DEL', conf: base({ ipMasq: true, ipMasqBackend }), ns: '' });
      expect(r.code, JSON.stringify(r.json)).toBe(0);
    }
    kernel.replies.set('nft', () => ({ code: 1, stdout: '', stderr: 'Error: No such file or directory\nlist chain inet cni_ts_masquerade postrouting\n' }));
    expect((await cni({ command: 'DEL', conf: base({ ipMasq: true }), ns: '' })).code).toBe(0);
  });

  for (const backend of ['iptables', 'nftables'] as const) {
    it(`${backend}: DEL racing another DEL of the same attachment lists again and succeeds (what is gone is gone)`, async () => {
      setIpamResult(IPAM_DUAL);
      const fw = fakeFirewall(kernel);
      expect((await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: backend }) })).code).toBe(0);
      expect(taggedRules(fw)[backend].length).toBeGreaterThan(0);
      // The other DEL removes everything between our listing and our removal.
      let raced = 0;
      fw.before = (argv0, input) => {
        const removing = argv0 === 'nft' ? input?.includes('delete rule') : argv0.endsWith('-restore');
        if (!removing || raced++) return;
        for (const f of [4, 6] as const) fw.ipt[f] = { chains: new Set(), rules: [] };
        fw.nft.rules = [];
      };
      const r = await cni({ command: 'DEL', conf: base({ ipMasq: true, ipMasqBackend: backend }), ns: '' });
      expect(r.code, JSON.stringify(r.json)).toBe(0);
      expect(raced).toBeGreaterThan(0);
      expect(taggedRules(fw)).toEqual({ iptables: [], nftables: [] });
    });
  }

  it('a removal that keeps failing is retried a few times against fresh listings, then reported', async () => {
    const fw = fakeFirewall(kernel);
    expect((await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: 'iptables' }) })).code).toBe(0);
    kernel.replies.set('iptables-restore', () => ({ code: 4, stdout: '', stderr: 'iptables-restore: Permission denied (you must be root)\n' }));
    const r = await cni({ command: 'DEL', conf: base({ ipMasq: true }), ns: '' });
    expect(r.json).toMatchObject({ code: 999, msg: expect.stringMatching(/removing masquerade rules: .*Permission denied/) });
    expect(kernel.calls.filter((c) => c.argv[0] === 'iptables-restore' && c.input!.includes('-D '))).toHaveLength(5);
    expect(taggedRules(fw).iptables.length).toBeGreaterThan(0);
  });

  it('GC removes stale attachments\' rules from both backends', async () => {
    const fw = fakeFirewall(kernel);
    for (const [id, backend] of [['live', 'iptables'], ['dead1', 'iptables'], ['dead2', 'nftables']] as const) {
      const ns = join(dir, `netns-${id}`);
      writeFileSync(ns, '');
      expect((await cni({ command: 'ADD', conf: base({ ipMasq: true, ipMasqBackend: backend }), id, ns })).code).toBe(0);
    }
    const conf = base({ cniVersion: '1.1.0', ipMasq: true, ipMasqBackend: 'ipfw', 'cni.dev/valid-attachments': [{ containerID: 'live', ifname: 'eth0' }] });
    const r = await cni({ command: 'GC', conf, ns: '' });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    const live = attachmentTags('unitnet', 'live', 'eth0').attTag;
    expect(taggedRules(fw).iptables.length).toBeGreaterThan(0);
    expect(taggedRules(fw).iptables.every((x) => x.includes(live))).toBe(true);
    expect(taggedRules(fw).nftables).toEqual([]);
  });
});

describe('CHECK', () => {
  async function added(extra: Record<string, unknown> = {}) {
    const conf = base(extra);
    const r = await cni({ command: 'ADD', conf });
    expect(r.code).toBe(0);
    return { ...conf, prevResult: r.json };
  }

  it('passes right after ADD', async () => {
    const conf = await added({ isDefaultGateway: true });
    const r = await cni({ command: 'CHECK', conf });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    expect(ipamLog()).toEqual(['ADD c1 eth0', 'CHECK c1 eth0']);
  });

  it('names a missing address', async () => {
    const conf = await added();
    kernel.links(netns).get('eth0')!.addrs = [];
    const r = await cni({ command: 'CHECK', conf });
    expect(r.json.msg).toBe('address 10.77.9.5/24 from prevResult is missing on eth0 (it has none)');
  });

  it('names a missing route', async () => {
    const conf = await added({ isDefaultGateway: true });
    kernel.routes.set(netns, kernel.routes.get(netns)!.filter((r) => r.dst !== 'default'));
    const r = await cni({ command: 'CHECK', conf });
    expect(r.json.msg).toMatch(/route to 0.0.0.0\/0 via 10.77.9.1 from prevResult is missing/);
  });

  it('looks for a route with a "table" (spec 1.1) in that table', async () => {
    setIpamResult({ cniVersion: '1.1.0', ips: [{ address: '10.77.9.5/24', gateway: '10.77.9.1' }], routes: [{ dst: '10.99.0.0/16', table: 100 }] });
    const conf = await added({ cniVersion: '1.1.0' });
    expect(kernel.ipLines().map((l) => l.line)).toContain('route append 10.99.0.0/16 via 10.77.9.1 dev eth0 table 100');
    // The kernel lists it in table 100 (`ip -json route show table all`: "table":"100").
    const route = kernel.routes.get(netns)!.find((r) => r.dst === '10.99.0.0/16') as { table?: string };
    route.table = '100';
    const ok = await cni({ command: 'CHECK', conf });
    expect(ok.code, JSON.stringify(ok.json)).toBe(0);
    // The same route in the main table is not the one prevResult names.
    route.table = 'main';
    expect((await cni({ command: 'CHECK', conf })).json.msg).toMatch(/route to 10.99.0.0\/16 table 100 from prevResult is missing/);
  });

  it('names a veth taken off the bridge, a missing bridge, a changed MAC', async () => {
    const conf = await added();
    const veth = kernel.links('').get(hostVethName('c1', 'eth0'))!;
    veth.master = undefined;
    expect((await cni({ command: 'CHECK', conf })).json.msg).toMatch(/is not attached to bridge "brunit0" \(master: none\)/);
    veth.master = 'brunit0';
    kernel.links(netns).get('eth0')!.mac = '02:12:34:56:78:9a';
    expect((await cni({ command: 'CHECK', conf })).json.msg).toMatch(/container interface eth0 has MAC 02:12:34:56:78:9a, prevResult says/);
    kernel.links('').delete('brunit0');
    expect((await cni({ command: 'CHECK', conf })).json.msg).toBe('bridge "brunit0" not found');
  });

  it('checks the host veth prevResult names (an attachment made by another implementation)', async () => {
    const conf = await added();
    const veth = hostVethName('c1', 'eth0');
    const link = kernel.links('').get(veth)!;
    kernel.links('').delete(veth);
    link.name = 'vethgo123456';
    kernel.links('').set('vethgo123456', link);
    kernel.links(netns).get('eth0')!.peer = { ns: '', name: 'vethgo123456' };
    const prev = conf.prevResult as { interfaces: { name: string }[] };
    prev.interfaces[1].name = 'vethgo123456';
    const r = await cni({ command: 'CHECK', conf });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
  });

  it('needs prevResult, and a sandbox that matches CNI_NETNS', async () => {
    expect((await cni({ command: 'CHECK', conf: base() })).json).toMatchObject({ code: 7, msg: 'CHECK needs the field "prevResult"' });
    const conf = await added();
    const other = join(dir, 'netns-other');
    writeFileSync(other, '');
    const r = await cni({ command: 'CHECK', conf, ns: other });
    expect(r.json.msg).toContain(`is in sandbox "${netns}", not CNI_NETNS ${other}`);
  });
});

describe('GC and STATUS', () => {
  it('GC removes masquerade rules of attachments not listed, in this network only, then calls the IPAM', async () => {
    const keep = attachmentTags('unitnet', 'live', 'eth0');
    const stale = attachmentTags('unitnet', 'dead', 'eth0');
    const other = attachmentTags('othernet', 'dead', 'eth0');
    const rule = (t: { netTag: string; attTag: string }, ip: string) =>
      `-A POSTROUTING -s ${ip}/32 -m comment --comment "cni-ts:${t.netTag}:${t.attTag} x" -j CNI-BR-${t.attTag}`;
    kernel.replies.set('iptables-save', () => ({
      code: 0,
      stderr: '',
      stdout: ['*nat', rule(keep, '10.77.9.2'), rule(stale, '10.77.9.3'), rule(other, '10.77.8.3'), 'COMMIT'].join('\n'),
    }));
    const conf = base({ cniVersion: '1.1.0', ipMasq: true, ipMasqBackend: 'iptables', 'cni.dev/valid-attachments': [{ containerID: 'live', ifname: 'eth0' }] });
    const r = await cni({ command: 'GC', conf, ns: '' });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    const restore = kernel.calls.filter((x) => x.argv[0] === 'iptables-restore');
    expect(restore).toHaveLength(1);
    expect(restore[0].input).toContain(`-D POSTROUTING -s 10.77.9.3/32`);
    expect(restore[0].input).not.toContain('10.77.9.2');
    expect(restore[0].input).not.toContain('10.77.8.3');
    expect(ipamLog()).toEqual(['GC c1 eth0']);
  });

  /** ADDs each [containerID, network] on bridge brunit0 (its own netns file each); returns the host veth names. */
  async function attach(list: [string, string][]): Promise<Record<string, string>> {
    const veths: Record<string, string> = {};
    for (const [id, name] of list) {
      const ns = join(dir, `netns-${id}`);
      writeFileSync(ns, '');
      const r = await cni({ command: 'ADD', conf: base({ name }), id, ns });
      expect(r.code, JSON.stringify(r.json)).toBe(0);
      veths[id] = hostVethName(id, 'eth0');
    }
    return veths;
  }
  const hostLinks = () => [...kernel.links('').keys()].sort();
  const gcConf = (extra: Record<string, unknown>) => base({ cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: 'live', ifname: 'eth0' }], ...extra });

  it('GC deletes the host veths of stale attachments on its bridge; never a valid one, another network\'s on the same bridge, or a link that is not ours', async () => {
    const v = await attach([['live', 'unitnet'], ['dead', 'unitnet'], ['dead-elsewhere', 'othernet'], ['pre-alias', 'unitnet']]);
    // made before veths carried an alias: a plain GC cannot tell whose it is
    kernel.links('').get(v['pre-alias'])!.alias = undefined;
    // not ours: a Go bridge's veth (veth + 8 hex), and a veth named like ours with someone else's alias
    kernel.links('').set('veth0123abcd', { ...kernel.links('').get(v.live)!, name: 'veth0123abcd', alias: undefined, peer: undefined });
    kernel.links('').set('vethaaaaaaaaaaa', { ...kernel.links('').get(v.live)!, name: 'vethaaaaaaaaaaa', alias: 'cni-ts:ffffffff:ffffffffffffffffffff', peer: undefined });
    rmSync(join(dir, 'ipam.log'), { force: true });

    const r = await cni({ command: 'GC', conf: gcConf({}), ns: '' });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    expect(hostLinks()).toEqual(['brunit0', 'veth0123abcd', 'vethaaaaaaaaaaa', v.live, v['dead-elsewhere'], v['pre-alias']].sort());
    expect(kernel.links(join(dir, 'netns-dead')).has('eth0')).toBe(false); // the container end went with it
    expect(kernel.ipLines().filter((l) => l.line.startsWith('link del'))).toEqual([{ netns: '', line: `link del dev ${v.dead}` }]);
    // the links first, then the addresses
    expect(ipamLog()).toEqual(['GC c1 eth0']);
  });

  it('GC with cni-ts.dev/stale-attachments releases only those (veths, masquerade rules); a veth from before aliases goes by its name', async () => {
    const fw = fakeFirewall(kernel);
    const conf = (extra: Record<string, unknown>) => base({ ipMasq: true, ipMasqBackend: 'iptables', ...extra });
    const v: Record<string, string> = {};
    for (const id of ['live', 'dead', 'pre-alias', 'unnamed']) {
      const ns = join(dir, `netns-${id}`);
      writeFileSync(ns, '');
      expect((await cni({ command: 'ADD', conf: conf({}), id, ns })).code).toBe(0);
      v[id] = hostVethName(id, 'eth0');
    }
    kernel.links('').get(v['pre-alias'])!.alias = undefined;
    kernel.links('').get(v.unnamed)!.alias = undefined;
    const stale = [{ containerID: 'dead', ifname: 'eth0' }, { containerID: 'pre-alias', ifname: 'eth0' }, { containerID: 'live', ifname: 'eth0' }];

    const r = await cni({ command: 'GC', conf: gcConf({ ipMasq: true, ipMasqBackend: 'iptables', 'cni-ts.dev/stale-attachments': stale }), ns: '' });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    // "live" is named stale but is valid: valid wins; "unnamed" is not valid but not named stale
    expect(hostLinks()).toEqual(['brunit0', v.live, v.unnamed].sort());
    const owners = taggedRules(fw).iptables.join('\n');
    for (const id of ['live', 'unnamed']) expect(owners).toContain(attachmentTags('unitnet', id, 'eth0').attTag);
    for (const id of ['dead', 'pre-alias']) expect(owners).not.toContain(attachmentTags('unitnet', id, 'eth0').attTag);
  });

  it('GC of a bridge that does not exist, or whose name cannot be a link, has no veths to delete', async () => {
    const r = await cni({ command: 'GC', conf: gcConf({ bridge: 'brnone0' }), ns: '' });
    expect(r.code, JSON.stringify(r.json)).toBe(0);
    const bad = await cni({ command: 'GC', conf: gcConf({ bridge: 'a/b' }), ns: '' });
    expect(bad.code, JSON.stringify(bad.json)).toBe(0);
    expect(kernel.ipLines().map((l) => l.line)).toEqual(['link show master brnone0 type veth']);
    expect(ipamLog()).toEqual(['GC c1 eth0', 'GC c1 eth0']);
  });

  it('GC without valid-attachments is a config error', async () => {
    const r = await cni({ command: 'GC', conf: base({ cniVersion: '1.1.0' }) });
    expect(r.json).toMatchObject({ code: 7 });
  });

  it('STATUS is the IPAM plugin\'s STATUS; an L2 network is always ready', async () => {
    writeFileSync(join(dir, 'ipam-fail-STATUS'), '');
    try {
      const r = await cni({ command: 'STATUS', conf: base({ cniVersion: '1.1.0' }) });
      expect(r.json).toMatchObject({ code: 11, msg: 'fake-ipam: pool busy' });
    } finally {
      rmSync(join(dir, 'ipam-fail-STATUS'));
    }
    expect((await cni({ command: 'STATUS', conf: base({ cniVersion: '1.1.0', ipam: undefined }) })).code).toBe(0);
  });

  it('STATUS: an IPAM plugin older than STATUS is available; one missing from CNI_PATH is code 50', async () => {
    // As Debian's Go host-local 1.1.1: spec up to 1.0.0; STATUS is an unknown command, or,
    // without a container ID (as a runtime calls STATUS), fails its checks for the other commands.
    const old = join(dir, 'old-ipam');
    writeFileSync(
      old,
      '#!/bin/sh\necho "$CNI_COMMAND" >> "$(dirname "$0")/old-ipam.log"\ncase "$CNI_COMMAND" in\n' +
        'VERSION) echo \'{"cniVersion":"1.0.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0"]}\' ;;\n' +
        '*) if [ -z "$CNI_CONTAINERID" ]; then echo \'{"code":3,"msg":"missing containerID"}\'; exit 1; fi\n' +
        '   echo "{\\"code\\":4,\\"msg\\":\\"unknown CNI_COMMAND: $CNI_COMMAND\\"}"; exit 1 ;;\nesac\n',
    );
    chmodSync(old, 0o755);
    const conf = base({ cniVersion: '1.1.0', ipam: { type: 'old-ipam' } });
    const withId = await cni({ command: 'STATUS', conf });
    expect(withId.code, JSON.stringify(withId.json)).toBe(0);
    const asRuntime = await cni({ command: 'STATUS', conf, id: '', ifname: '', ns: '' });
    expect(asRuntime.code, JSON.stringify(asRuntime.json)).toBe(0);
    expect(readFileSync(join(dir, 'old-ipam.log'), 'utf8').trim().split('\n')).toEqual(['STATUS', 'STATUS', 'VERSION']);

    const missing = await cni({ command: 'STATUS', conf: base({ cniVersion: '1.1.0', ipam: { type: 'no-such-ipam' } }) });
    expect(missing.json).toMatchObject({ code: 50, msg: expect.stringMatching(/plugin "no-such-ipam" \(field "ipam.type"\) not found in CNI_PATH/) });
  });
});
