// The iproute layer without a kernel: batch output parsing, command builders,
// and the firewall helpers' scripts, against recorded command lines.
import { afterEach, describe, expect, it } from 'vitest';
import { setRunner, type Runner } from '../../../src/iproute/exec';
import { Batch, isBatchSafe, LineError, parseFailures, runBatch, splitJson, UnsafeWordError, BatchProcessError } from '../../../src/iproute/batch';
import { firstLink } from '../../../src/iproute/link';
import { bridgeAdd, bridgePortSet, linkSet, vethAdd } from '../../../src/iproute/link';
import { isMulticastMac, normalizeMac, randomMac } from '../../../src/net/mac';
import { linkNameProblem as ifnameProblem } from '../../../src/net/ifname';
import { addrAdd, addrReplace } from '../../../src/iproute/addr';
import { routeAppend, routeDstCidr, routeReplace, routeTableId } from '../../../src/iproute/route';
import { vlanAdd, vlanDel, vlanRanges } from '../../../src/iproute/vlan';
import { sysctlArgv } from '../../../src/iproute/sysctl';
import { masqAdd, masqCheck, masqDel, masqList } from '../../../src/iproute/masq';
import { labelOwner, masqComment } from '../../../src/iproute/masq-rule';
import { NFT_TABLE } from '../../../src/iproute/masq-nftables';
import { spoofchkAdd, spoofchkDel, spoofchkGc } from '../../../src/iproute/spoofchk';
import { syncRunner } from '../../../src/iproute/sync-runner';
import { vxlanAdd, vxlanMismatch, type VxlanSpec } from '../../../src/iproute/vxlan';
import type { IpLink } from '../../../src/iproute/link';

let restore: Runner | undefined;
const calls: { argv: readonly string[]; input?: string }[] = [];

// A recording runner rather than the fake kernel: this file tests the layer that builds the argv and
// batches and reads the tools' answers, so it checks exactly what is run and injects each reply
// (failure markers, odd output) that the layer must understand.
function fake(reply: (argv: readonly string[], input?: string) => { stdout?: string; stderr?: string; code?: number }): void {
  calls.length = 0;
  restore = setRunner(async (argv, input) => {
    calls.push({ argv, input });
    const r = reply(argv, input);
    return { stdout: r.stdout ?? '', stderr: r.stderr ?? '', code: r.code ?? 0 };
  });
}

afterEach(() => {
  if (restore) setRunner(restore);
  restore = undefined;
});

describe('batch', () => {
  it('maps "Command failed" markers to the message printed before each', () => {
    const stderr = 'RTNETLINK answers: File exists\nCommand failed -:1\nCannot find device "x"\nCommand failed -:4\n';
    expect([...parseFailures(stderr)]).toEqual([
      [1, 'RTNETLINK answers: File exists'],
      [4, 'Cannot find device "x"'],
    ]);
  });

  it('splits concatenated JSON, including brackets inside strings', () => {
    expect(splitJson('[{"a":"]["}]\n[]\n{"b":"\\"}"}\n')).toEqual([[{ a: '][' }], [], { b: '"}' }]);
    expect(() => splitJson('[{"a":1}')).toThrow(/truncated/);
  });

  it('runs one -force batch and gives each query line its JSON, skipping failed ones', async () => {
    fake(() => ({
      stdout: '[{"ifname":"a"}]\n[{"ifname":"c"}]\n',
      stderr: 'Device "b" does not exist.\nCommand failed -:3\n',
      code: 1,
    }));
    const lines = [['addr', 'show', 'dev', 'a'], ['link', 'set', 'dev', 'a', 'up'], ['addr', 'show', 'dev', 'b'], ['addr', 'show', 'dev', 'c']];
    const r = await runBatch('ip', lines, { json: true, details: true, netns: '/run/netns/x' });
    expect(calls[0].argv).toEqual(['nsenter', '--net=/run/netns/x', '--', 'ip', '-json', '-details', '-force', '-batch', '-']);
    expect(calls[0].input).toBe('addr show dev a\nlink set dev a up\naddr show dev b\naddr show dev c\n');
    expect(r.outputs).toEqual([[{ ifname: 'a' }], undefined, undefined, [{ ifname: 'c' }]]);
    expect(r.errors).toEqual([undefined, undefined, 'Device "b" does not exist.', undefined]);
    expect(r.firstError).toBe(2);
  });

  it('Batch: each line hands back its own error and parsed output', async () => {
    fake(() => ({
      stdout: '[{"ifname":"a"}]\n',
      stderr: 'RTNETLINK answers: File exists\nCommand failed -:1\nDevice "b" does not exist.\nCommand failed -:3\n',
      code: 1,
    }));
    const b = new Batch('ip');
    const create = b.add(['link', 'add', 'name', 'a', 'type', 'bridge']);
    const a = b.query(['addr', 'show', 'dev', 'a'], firstLink);
    const missing = b.query(['addr', 'show', 'dev', 'b'], firstLink);
    const up = b.add(['link', 'set', 'dev', 'a', 'up']);
    await b.run({ json: true });
    expect(calls).toHaveLength(1);
    expect(create.error).toBe('RTNETLINK answers: File exists');
    expect(a.output?.ifname).toBe('a');
    expect(missing).toMatchObject({ error: 'Device "b" does not exist.', output: undefined });
    expect(up.error).toBeUndefined();
    expect(b.failed()).toEqual([create, missing]);
    expect(() => b.throwFailed()).toThrow(LineError);
    expect(() => b.throwFailed()).toThrow('ip link add name a type bridge: RTNETLINK answers: File exists');
  });

  it('fails as a whole when the process fails without line markers (e.g. cannot enter the namespace)', async () => {
    fake(() => ({ stderr: 'nsenter: cannot open /x: No such file or directory', code: 1 }));
    await expect(runBatch('ip', [['link', 'show']], { netns: '/x' })).rejects.toBeInstanceOf(BatchProcessError);
  });

  it('refuses words -batch would split, unquote or cut at #', async () => {
    fake(() => ({}));
    for (const bad of ['a b', 'a"b', "a'b", 'a\\b', 'a#b', '']) {
      await expect(runBatch('ip', [['link', 'del', bad]])).rejects.toBeInstanceOf(UnsafeWordError);
      expect(isBatchSafe([bad])).toBe(false);
    }
    expect(calls).toHaveLength(0);
  });
});

describe('builders', () => {
  it('links', () => {
    expect(bridgeAdd('br0', { mtu: 1400, mac: '02:00:00:00:00:01', vlanFiltering: true })).toEqual(
      ['link', 'add', 'name', 'br0', 'mtu', '1400', 'address', '02:00:00:00:00:01', 'type', 'bridge', 'vlan_filtering', '1'],
    );
    expect(vethAdd({ name: 'v1', peer: 'eth0', peerNetns: '/proc/1/ns/net', master: 'br0', up: true, peerMac: '02:00:00:00:00:02' }).join(' ')).toBe(
      'link add name v1 master br0 up type veth peer name eth0 address 02:00:00:00:00:02 netns /proc/1/ns/net',
    );
    expect(linkSet('br0', { up: true, promisc: true }).join(' ')).toBe('link set dev br0 promisc on up');
    expect(bridgePortSet('v1', { hairpin: true, isolated: false }).join(' ')).toBe('link set dev v1 type bridge_slave hairpin on isolated off');
  });

  it('addresses, routes, VLANs', () => {
    expect(addrAdd('eth0', 'fd00::5/64', { nodad: true }).join(' ')).toBe('addr add fd00::5/64 dev eth0 nodad');
    expect(addrReplace('br0', '10.0.0.1/24').join(' ')).toBe('addr replace 10.0.0.1/24 dev br0');
    expect(routeAppend({ dst: '0.0.0.0/0', gw: '10.0.0.1', dev: 'eth0', mtu: 1400 }).join(' ')).toBe('route append 0.0.0.0/0 via 10.0.0.1 dev eth0 mtu 1400');
    expect(routeReplace({ dst: '10.2.0.0/24', gw: '10.2.0.0', dev: 'flannel.1', onlink: true }).join(' ')).toBe('route replace 10.2.0.0/24 via 10.2.0.0 dev flannel.1 onlink');
    expect(routeDstCidr('default', 6)).toBe('::/0');
    expect(routeDstCidr('10.0.0.5', 4)).toBe('10.0.0.5/32');
    expect([undefined, 'main', '100', 'local', 'no-such-table-name'].map(routeTableId)).toEqual([254, 254, 100, 255, undefined]);
    expect(vlanAdd('v1', 10, { pvid: true, untagged: true }).join(' ')).toBe('vlan add dev v1 vid 10 pvid untagged');
    expect(vlanDel('v1', [5, 7]).join(' ')).toBe('vlan del dev v1 vid 5-7');
    expect(() => vlanAdd('v1', 4095)).toThrow(/invalid VLAN ID/);
    expect(vlanRanges([7, 1, 2, 3, 9, 8, 2])).toEqual([[1, 3], [7, 9]]);
  });

  it('names and MACs', () => {
    expect(ifnameProblem('eth0')).toBeUndefined();
    expect(ifnameProblem('0123456789abcdef')).toMatch(/longer than 15/);
    expect(ifnameProblem('a/b')).toBeDefined();
    expect(ifnameProblem('a#b')).toMatch(/ip -batch/);
    expect(ifnameProblem('rvb%d')).toMatch(/'%'.*template/);
    expect(ifnameProblem('a%b')).toBeDefined();
    expect(normalizeMac('02-AA-bb-CC-dd-01')).toBe('02:aa:bb:cc:dd:01');
    expect(normalizeMac('02:aa:bb:cc:dd')).toBeUndefined();
    for (let i = 0; i < 50; i++) {
      const m = randomMac();
      expect(normalizeMac(m)).toBe(m);
      expect(isMulticastMac(m)).toBe(false);
      expect(parseInt(m.slice(0, 2), 16) & 2).toBe(2);
    }
  });

  it('sysctl argv for another namespace: slash keys (dots allowed in names), -e', () => {
    expect(sysctlArgv([['net/ipv6/conf/eth0.100/accept_dad', '0']])).toEqual(['sysctl', '-q', '-e', '-w', 'net/ipv6/conf/eth0.100/accept_dad=0']);
    expect(() => sysctlArgv([['net/../x', '1']])).toThrow();
    expect(() => sysctlArgv([['net/ipv4/ip_forward', '1 2']])).toThrow();
  });
});

const owner = { netTag: 'aaaaaaaa', attTag: 'bbbbbbbbbbbbbbbbbbbb', label: 'net=n id=c "quoted" if=eth0' };

describe('VXLAN devices', () => {
  const spec: VxlanSpec = { name: 'flannel.1', vni: 1, local: '192.0.2.1', dev: 'eth0', port: 8472, mac: '0a:00:00:00:00:01', mtu: 1450 };
  const link = (data: Record<string, unknown>): IpLink => ({ ifindex: 5, ifname: 'flannel.1', flags: [], mtu: 1450, linkinfo: { info_kind: 'vxlan', info_data: { id: 1, local: '192.0.2.1', link: 'eth0', port: 8472, learning: false, ...data } } });

  it('created nolearning by default; learning and gbp when the backend asks (flannel Backend.Learning, Backend.GBP)', () => {
    expect(vxlanAdd(spec).join(' ')).toBe('link add name flannel.1 address 0a:00:00:00:00:01 mtu 1450 type vxlan id 1 local 192.0.2.1 dev eth0 dstport 8472 nolearning');
    expect(vxlanAdd({ ...spec, learning: true, gbp: true }).slice(-2)).toEqual(['learning', 'gbp']);
  });

  it('an existing device whose learning or gbp differs is not reused', () => {
    expect(vxlanMismatch(link({}), spec)).toBeUndefined();
    expect(vxlanMismatch(link({ gbp: true }), spec)).toBe('gbp on (want no gbp)');
    expect(vxlanMismatch(link({}), { ...spec, gbp: true })).toBe('gbp off (want gbp)');
    expect(vxlanMismatch(link({ learning: true }), spec)).toBe('learning on (want nolearning)');
    expect(vxlanMismatch(link({ learning: true, gbp: true }), { ...spec, learning: true, gbp: true })).toBeUndefined();
    expect(vxlanMismatch(link({ id: 2, port: 4789 }), spec)).toBe('VNI 2 (want 1), port 4789 (want 8472)');
    expect(vxlanMismatch({ ...link({}), linkinfo: { info_kind: 'bridge' } }, spec)).toBe('it is a bridge device');
  });
});

describe('masquerade', () => {
  it('comments carry the tags and a sanitized, bounded label', () => {
    const c = masqComment({ ...owner, label: 'x'.repeat(300) });
    expect(c.startsWith('cni-ts:aaaaaaaa:bbbbbbbbbbbbbbbbbbbb ')).toBe(true);
    expect(c.length).toBeLessThanOrEqual(120);
    expect(masqComment(owner)).not.toContain('"');
  });

  it('nftables: one nft script per ADD; DEL lists the chain and deletes by handle', async () => {
    fake((argv) => {
      if (argv.includes('list')) {
        return {
          stdout: JSON.stringify({
            nftables: [
              { rule: { handle: 5, comment: 'cni-ts:aaaaaaaa:bbbbbbbbbbbbbbbbbbbb x', expr: [{ match: { op: '==', left: { payload: { protocol: 'ip', field: 'saddr' } }, right: '10.0.0.5' } }] } },
              { rule: { handle: 6, comment: 'cni-ts:aaaaaaaa:cccccccccccccccccccc x', expr: [] } },
              { rule: { handle: 7, comment: 'someone else' } },
            ],
          }),
        };
      }
      return {};
    });
    await masqAdd('nftables', owner, [
      { ip: '10.0.0.5', family: 4, subnet: '10.0.0.0/24' },
      { ip: 'fd00::5', family: 6, subnet: 'fd00::/64' },
    ]);
    expect(calls[0].argv).toEqual(['nft', '-f', '-']);
    expect(calls[0].input).toContain(`add chain inet ${NFT_TABLE} postrouting { type nat hook postrouting priority srcnat; policy accept; }`);
    expect(calls[0].input).toContain('ip saddr 10.0.0.5 ip daddr != { 10.0.0.0/24 } ip daddr != 224.0.0.0/4 masquerade comment "cni-ts:aaaaaaaa:bbbbbbbbbbbbbbbbbbbb');
    expect(calls[0].input).toContain('ip6 saddr fd00::5 ip6 daddr != { fd00::/64 } ip6 daddr != ff00::/8 masquerade');
    calls.length = 0;
    expect(await masqDel('nftables', 'bbbbbbbbbbbbbbbbbbbb')).toEqual(['bbbbbbbbbbbbbbbbbbbb']);
    expect(calls[1].input).toBe(`delete rule inet ${NFT_TABLE} postrouting handle 5\n`);
    expect(await masqCheck('nftables', 'bbbbbbbbbbbbbbbbbbbb', ['10.0.0.5'])).toBeUndefined();
    expect(await masqCheck('nftables', 'bbbbbbbbbbbbbbbbbbbb', ['10.0.0.6'])).toMatch(/10.0.0.6 are missing/);
    expect((await masqList('nftables')).map((e) => e.attTag)).toEqual(['bbbbbbbbbbbbbbbbbbbb', 'cccccccccccccccccccc']);
  });

  it('a listing names each attachment as its comment\'s label does; a value the comment\'s cut reached ends in "…"', async () => {
    const id = 'f'.repeat(64);
    const long = masqComment({ ...owner, label: `net=cbr0 id=${id} if=eth0` }); // 121 characters: cut
    expect(labelOwner(long)).toEqual({ network: 'cbr0', containerId: id, ifname: 'eth…' });
    expect(labelOwner(masqComment({ ...owner, label: 'net=n1 id=c1 if=eth0' }))).toEqual({ network: 'n1', containerId: 'c1', ifname: 'eth0' });
    expect(labelOwner('cni-ts:aaaaaaaa:bbbbbbbbbbbbbbbbbbbb')).toEqual({});
    const chain = 'CNI-BR-bbbbbbbbbbbbbbbbbbbb';
    fake((argv) => (argv[0] === 'iptables-save' ? { stdout: ['*nat', `-A POSTROUTING -s 10.0.0.5/32 -m comment --comment "${long}" -j ${chain}`, 'COMMIT'].join('\n') } : { stdout: '' }));
    expect(await masqList('iptables')).toEqual([{ netTag: 'aaaaaaaa', attTag: 'bbbbbbbbbbbbbbbbbbbb', network: 'cbr0', containerId: id, ifname: 'eth…', ips: ['10.0.0.5'], masquerades: false, backend: 'iptables' }]);
  });

  it('nftables: a missing table is an empty listing, not an error', async () => {
    fake(() => ({ code: 1, stderr: 'Error: No such file or directory\nlist chain inet cni_ts_masquerade postrouting' }));
    expect(await masqDel('nftables', 'bbbbbbbbbbbbbbbbbbbb')).toEqual([]);
    expect(calls).toHaveLength(1);
  });

  it('iptables: CHECK wants the source rule of every address and the MASQUERADE rule', async () => {
    const c = '-m comment --comment "cni-ts:aaaaaaaa:bbbbbbbbbbbbbbbbbbbb x"';
    const chain = 'CNI-BR-bbbbbbbbbbbbbbbbbbbb';
    const save = (withMasq: boolean) =>
      ['*nat', `-A POSTROUTING -s 10.0.0.5/32 ${c} -j ${chain}`, `-A ${chain} -d 10.0.0.0/24 ${c} -j ACCEPT`, ...(withMasq ? [`-A ${chain} ! -d 224.0.0.0/4 ${c} -j MASQUERADE`] : []), 'COMMIT'].join('\n');
    let withMasq = true;
    fake((argv) => (argv[0] === 'iptables-save' ? { stdout: save(withMasq) } : {}));
    expect(await masqCheck('iptables', 'bbbbbbbbbbbbbbbbbbbb', ['10.0.0.5'])).toBeUndefined();
    expect(await masqCheck('iptables', 'bbbbbbbbbbbbbbbbbbbb', ['10.0.0.6'])).toMatch(/10.0.0.6 are missing/);
    withMasq = false;
    expect(await masqCheck('iptables', 'bbbbbbbbbbbbbbbbbbbb', ['10.0.0.5'])).toMatch(/MASQUERADE rule of chain CNI-BR-b+ is missing/);
  });

  it('iptables: nothing tagged means no restore', async () => {
    fake(() => ({ stdout: '*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -s 10.0.0.0/8 -j MASQUERADE\nCOMMIT\n' }));
    expect(await masqDel('iptables', 'bbbbbbbbbbbbbbbbbbbb')).toEqual([]);
    expect(calls.map((c) => c.argv[0]).sort()).toEqual(['ip6tables-save', 'iptables-save']);
  });
});

describe('MAC spoof check', () => {
  const o = { netTag: 'aaaaaaaa', attTag: 'bbbbbbbbbbbbbbbbbbbb' };

  it('setup and teardown are one nft script each; teardown adds before it deletes (idempotent)', async () => {
    fake(() => ({}));
    await spoofchkAdd(o, 'veth0123456789a', '02:00:00:00:00:01');
    expect(calls[0].input).toContain('add rule bridge cni_ts_macspoofchk port-aaaaaaaa-bbbbbbbbbbbbbbbbbbbb ether saddr 02:00:00:00:00:01 return');
    expect(calls[0].input).toContain('add element bridge cni_ts_macspoofchk ports { "veth0123456789a" : jump port-aaaaaaaa-bbbbbbbbbbbbbbbbbbbb }');
    await spoofchkDel(o, 'veth0123456789a');
    const lines = calls[1].input!.trim().split('\n');
    expect(lines.indexOf('add element bridge cni_ts_macspoofchk ports { "veth0123456789a" : jump port-aaaaaaaa-bbbbbbbbbbbbbbbbbbbb }')).toBeLessThan(
      lines.indexOf('delete element bridge cni_ts_macspoofchk ports { "veth0123456789a" }'),
    );
    await expect(spoofchkAdd(o, 'bad name', '02:00:00:00:00:01')).rejects.toThrow();
  });

  it('GC removes the chains (and their port entries) of stale attachments of one network', async () => {
    fake((argv) =>
      argv.includes('list')
        ? {
            stdout: JSON.stringify({
              nftables: [
                { map: { name: 'ports', elem: [['vethstale', { jump: { target: 'port-aaaaaaaa-cccccccccccccccccccc' } }]] } },
                { chain: { name: 'port-aaaaaaaa-bbbbbbbbbbbbbbbbbbbb' } },
                { chain: { name: 'port-aaaaaaaa-cccccccccccccccccccc' } },
                { chain: { name: 'port-dddddddd-cccccccccccccccccccc' } },
              ],
            }),
          }
        : {},
    );
    expect(await spoofchkGc('aaaaaaaa', (att) => att === 'bbbbbbbbbbbbbbbbbbbb')).toEqual(['cccccccccccccccccccc']);
    expect(calls[1].input).toContain('delete element bridge cni_ts_macspoofchk ports { "vethstale" }');
    expect(calls[1].input).toContain('delete chain bridge cni_ts_macspoofchk port-aaaaaaaa-cccccccccccccccccccc');
    expect(calls[1].input).not.toContain('port-dddddddd');
  });
});

describe('syncRunner', () => {
  it('feeds stdin, collects stdout, stderr and the exit code', async () => {
    expect(await syncRunner(['cat'], 'hello')).toEqual({ stdout: 'hello', stderr: '', code: 0 });
    const r = await syncRunner(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    expect(r).toEqual({ stdout: 'out\n', stderr: 'err\n', code: 3 });
  });

  it('rejects when the program is not installed (ENOENT, as the async runner does)', async () => {
    await expect(syncRunner(['no-such-program-cni-ts'])).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
