// The bridge plugin with the real world around it: a libcni runtime (the
// project's test/libcni-driver, run as cnitool is) driving a conflist of our
// bridge, Debian's tuning and portmap, with the script executables and with
// the standalone ones on a host view without Node.js; our bridge beside the
// Go reference bridge on the same config; our in-process host-local against
// exec'ing it; our bridge with Go's host-local.
// Subnets 10.77.40-59.0/24 and fd77:40-59::/64.
import { execFileSync } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { GO_BIN, GO_BRIDGE, Lab, OUR_BIN, globalAddrs, type IpLinkJson } from './bridge-helpers';
import { runIn } from './helpers';
import { STANDALONE_BIN, withoutNode } from './no-node';

let lab: Lab;
let chainPath: string;

beforeAll(() => {
  lab = new Lab('bri');
  chainPath = pathWithoutIp6tables();
});

afterAll(() => lab?.close());

/**
 * A PATH without ip6tables. Debian's portmap 1.1.1 CHECKs its rules in both
 * the IPv4 and the IPv6 table whatever the container's families (so CHECK of
 * any chain with portmap fails, with the Go bridge too) unless ip6tables is
 * not installed. This PATH gives the whole chain a host without ip6tables,
 * which our bridge must handle as well.
 */
function pathWithoutIp6tables(): string {
  const dir = join(lab.dir, 'path-no-ip6tables');
  mkdirSync(dir);
  for (const prog of ['ip', 'bridge', 'nsenter', 'sysctl', 'iptables', 'iptables-save', 'iptables-restore', 'nft']) {
    symlinkSync(execFileSync('sh', ['-c', 'command -v "$1"', 'sh', prog], { encoding: 'utf8' }).trim(), join(dir, prog));
  }
  symlinkSync(process.execPath, join(dir, 'node'));
  return dir;
}

interface Form {
  form: string;
  bin: string;
  /** Runs the runtime where Node.js cannot run. */
  noNode: boolean;
}
const FORMS: Form[] = [
  { form: 'scripts', bin: OUR_BIN, noNode: false },
  { form: 'standalone executables, no Node.js on the host', bin: STANDALONE_BIN, noNode: true },
];

/** `libcni-driver cmd NETWORK NETNS ID` in the lab's host namespace, run as cnitool is: NETCONFPATH, CNI_PATH, CAP_ARGS. */
function drive(f: Form, cmd: 'add' | 'check' | 'del', netconfPath: string, ns: string, id: string, capArgs?: unknown) {
  const run = ['nsenter', `--net=${lab.hostPath}`, '--', inject('libcniDriver'), cmd, 'chain', lab.path(ns), id];
  const argv = f.noNode ? withoutNode(run) : run;
  try {
    const out = execFileSync(argv[0], argv.slice(1), {
      env: { PATH: chainPath, NETCONFPATH: netconfPath, CNI_PATH: `${f.bin}:${GO_BIN}`, ...(capArgs ? { CAP_ARGS: JSON.stringify(capArgs) } : {}) },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return { code: 0, out };
  } catch (err) {
    const e = err as { status?: number; stdout?: string; stderr?: string };
    return { code: e.status ?? 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describe.each(FORMS)('libcni: bridge -> tuning -> portmap ($form)', (f) => {
  it('ADD, CHECK with the cached prevResult, DEL', async () => {
    const netconfPath = join(lab.dir, `net.d-${f.bin === OUR_BIN ? 'scripts' : 'standalone'}`);
    mkdirSync(netconfPath);
    writeFileSync(
      join(netconfPath, '10-chain.conflist'),
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'chain',
        plugins: [
          {
            type: 'bridge',
            bridge: 'bri0',
            isGateway: true,
            isDefaultGateway: true,
            ipMasq: true,
            // IPv4 only: without ip6tables (see pathWithoutIp6tables) there is no IPv6 masquerade.
            ipam: { type: 'host-local', ranges: [[{ subnet: '10.77.40.0/24' }]], dataDir: join(lab.dir, 'ipam') },
          },
          { type: 'tuning', sysctl: { 'net.ipv4.conf.eth0.rp_filter': '2' } },
          { type: 'portmap', capabilities: { portMappings: true } },
        ],
      }),
    );
    const c = lab.netns('chain');
    const id = f.noNode ? 'chain-sa' : 'chain-js';
    const ports = { portMappings: [{ hostPort: 18040, containerPort: 80, protocol: 'tcp' }] };
    const added = drive(f, 'add', netconfPath, c, id, ports);
    expect(added.code, added.out).toBe(0);
    const result = JSON.parse(added.out);
    expect(result.interfaces[0].name).toBe('bri0');
    expect(result.interfaces[2]).toMatchObject({ name: 'eth0', sandbox: lab.path(c) });
    expect(result.ips).toEqual([{ address: expect.stringMatching(/^10\.77\.40\.\d+\/24$/), gateway: '10.77.40.1', interface: 2 }]);
    // tuning ran on our result, inside the container.
    expect(lab.in(c, ['cat', '/proc/sys/net/ipv4/conf/eth0/rp_filter']).trim()).toBe('2');
    // portmap ran on our result, in the host.
    const nat = lab.in(lab.host, ['iptables-save', '-t', 'nat']);
    expect(nat).toMatch(/--dport 18040 .*DNAT --to-destination 10\.77\.40\.\d+:80/);
    expect(nat).toContain('cni-ts:');
    expect(lab.ping(c, '10.77.40.1')).toBe(true);

    const checked = drive(f, 'check', netconfPath, c, id, ports);
    expect(checked.code, checked.out).toBe(0);

    // Drift is caught through libcni too.
    lab.in(c, ['ip', 'addr', 'del', result.ips[0].address, 'dev', 'eth0']);
    const drifted = drive(f, 'check', netconfPath, c, id, ports);
    expect(drifted.code).not.toBe(0);
    expect(drifted.out).toContain(`address ${result.ips[0].address} from prevResult is missing on eth0`);

    const deleted = drive(f, 'del', netconfPath, c, id, ports);
    expect(deleted.code, deleted.out).toBe(0);
    const after = lab.in(lab.host, ['iptables-save', '-t', 'nat']);
    expect(after).not.toContain('18040');
    expect(after).not.toContain('cni-ts:');
    expect(lab.links(lab.host).filter((l) => l.master === 'bri0')).toEqual([]);
    expect(drive(f, 'del', netconfPath, c, id, ports).code).toBe(0);
    lab.delNetns(c);
  });
});

/** What the container sees: addresses (IPv4 with their broadcast address), routes, MTU (names and MACs aside). */
function containerView(ns: string) {
  const eth0 = lab.link(ns, 'eth0') as IpLinkJson;
  const routes = lab
    .routes(ns)
    .filter((r) => !r.dst.startsWith('fe80'))
    .map((r) => `${r.dst}${r.gateway ? ` via ${r.gateway}` : ''} dev ${r.dev}`)
    .sort();
  const brd = eth0.addr_info.filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen} brd ${a.broadcast ?? 'none'}`);
  return { addrs: globalAddrs(eth0).sort(), brd, routes, mtu: eth0.mtu, up: eth0.flags.includes('UP') };
}

describe('the same config through our bridge and the Go bridge', () => {
  const configs: [string, Record<string, unknown>][] = [
    [
      'dual-stack, default gateway, MTU',
      { isGateway: true, isDefaultGateway: true, mtu: 1450, ipam: { type: 'host-local', ranges: [[{ subnet: '10.77.41.0/24' }], [{ subnet: 'fd77:41::/64' }]] } },
    ],
    [
      'IPv4 with IPAM routes and DNS, no gateway on the bridge',
      { ipam: { type: 'host-local', subnet: '10.77.42.0/24', gateway: '10.77.42.1', routes: [{ dst: '10.99.0.0/16' }, { dst: '10.98.0.0/16', gw: '10.77.42.254' }] }, dns: { nameservers: ['10.77.42.53'] } },
    ],
    ['L2 only', {}],
  ];
  for (const [i, [what, extra]] of configs.entries()) {
    for (const version of ['1.0.0', '0.4.0', '0.3.1']) {
      it(`${what} (cniVersion ${version}): same addresses, routes, MTU and result`, async () => {
        const goHost = lab.netns(`hgo${i}`);
        const views = [];
        const results = [];
        for (const [who, hostPath, plugin] of [
          ['ours', lab.hostPath, join(OUR_BIN, 'bridge')],
          ['go', `/run/netns/${goHost}`, GO_BRIDGE],
        ] as const) {
          const ns = lab.netns(`cmp${i}-${who}`);
          const ipam = extra.ipam ? { ...(extra.ipam as object), dataDir: join(lab.dir, `cmp-${who}`) } : undefined;
          const conf = { cniVersion: version, name: `cmp${i}`, type: 'bridge', bridge: `bric${i}`, ...extra, ...(ipam ? { ipam } : {}) };
          const env = { PATH: process.env.PATH!, CNI_COMMAND: 'ADD', CNI_CONTAINERID: `cmp-${version}`, CNI_NETNS: lab.path(ns), CNI_IFNAME: 'eth0', CNI_PATH: `${OUR_BIN}:${GO_BIN}` };
          const r = await runIn(hostPath, [plugin], env, JSON.stringify(conf));
          expect(r.code, `${who}: ${r.stdout}${r.stderr}`).toBe(0);
          views.push(containerView(ns));
          results.push(r.json);
          const d = await runIn(hostPath, [plugin], { ...env, CNI_COMMAND: 'DEL' }, JSON.stringify(conf));
          expect(d.code, `${who} DEL: ${d.stdout}`).toBe(0);
          lab.delNetns(ns);
        }
        lab.delNetns(goHost);
        expect(views[0]).toEqual(views[1]);
        // The results agree but for MACs and the host veth's (random in Go) name.
        const strip = (r: Record<string, unknown>) => ({
          ...r,
          interfaces: (r.interfaces as { name: string; sandbox?: string }[] | undefined)?.map((x, k) => ({ name: k === 1 ? 'veth' : x.name, inSandbox: !!x.sandbox })),
        });
        expect(strip(results[0])).toEqual(strip(results[1]));
      });
    }
  }
});

describe('IPAM: in-process host-local gives what exec-ing it gives', () => {
  it('the same results and the same errors', async () => {
    const outputs: Record<string, string[]> = {};
    for (const mode of ['in-process', 'exec']) {
      const conf = {
        cniVersion: '1.0.0',
        name: `ipam-${mode}`,
        type: 'bridge',
        bridge: mode === 'exec' ? 'brix' : 'brip',
        isGateway: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: '10.77.43.0/29' }], [{ subnet: 'fd77:43::/125' }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: join(lab.dir, `ipam-${mode}`) },
      };
      const env: Record<string, string> = mode === 'exec' ? { CNI_TS_IPAM_EXEC: '1' } : {};
      outputs[mode] = [];
      const made: string[] = [];
      // 6 usable IPv4 addresses (one is the gateway): the 6th ADD runs out.
      for (let k = 0; k < 6; k++) {
        const ns = lab.netns(`${mode === 'exec' ? 'ix' : 'ip'}${k}`);
        made.push(ns);
        const r = await lab.cni({ command: 'ADD', conf, netns: lab.path(ns), id: `id${k}`, env });
        const json = r.json ?? {};
        // Names and MACs differ by design (bridge per mode); the addressing must not.
        outputs[mode].push(JSON.stringify({ code: r.code, ips: json.ips, routes: json.routes, dns: json.dns, err: json.code ? json : undefined }).replaceAll(`ipam-${mode}`, 'NET'));
      }
      for (const [k, ns] of made.entries()) {
        expect((await lab.cni({ command: 'DEL', conf, netns: lab.path(ns), id: `id${k}`, env })).code).toBe(0);
        lab.delNetns(ns);
      }
    }
    expect(outputs['in-process']).toEqual(outputs.exec);
    expect(outputs.exec[5]).toContain('"code":1');
  });

  it("our bridge with Go's host-local (exec, found first in CNI_PATH)", async () => {
    const conf = { cniVersion: '1.0.0', name: 'gohl', type: 'bridge', bridge: 'brgohl', isGateway: true, ipam: { type: 'host-local', subnet: '10.77.44.0/24', dataDir: join(lab.dir, 'gohl') } };
    const ns = lab.netns('gohl');
    const r = await lab.cni({ command: 'ADD', conf, netns: lab.path(ns), id: 'g', path: `${GO_BIN}:${OUR_BIN}` });
    expect(r.code, r.stdout).toBe(0);
    expect(r.json.ips[0]).toMatchObject({ address: '10.77.44.2/24', gateway: '10.77.44.1', interface: 2 });
    expect(lab.ping(ns, '10.77.44.1')).toBe(true);
    expect((await lab.cni({ command: 'DEL', conf, netns: lab.path(ns), id: 'g', path: `${GO_BIN}:${OUR_BIN}` })).code).toBe(0);
  });
});
