import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { handle } from '../../../../src/cni/skel';
import { flannelPlugin, loadFlannelConf, renderDelegate } from '../../../../src/flannel/plugin/cni';
import { parseSubnetEnv } from '../../../../src/flannel/subnet-env';
import { FakeKernel } from '../../../support/fake-kernel';

// A fake delegate "bridge" in a temp CNI_PATH: logs each call (command, env, stdin)
// and prints a result for ADD; fails while <dir>/fail-<COMMAND> exists.
const FAKE = `#!/bin/sh
dir=$(dirname "$0")
conf=$(cat)
printf '%s\\t%s\\t%s\\t%s\\n' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_IFNAME" "$conf" >> "$dir/calls.log"
if [ -e "$dir/fail-$CNI_COMMAND" ]; then echo '{"code":11,"msg":"fake failure"}'; exit 1; fi
if [ "$CNI_COMMAND" = ADD ]; then echo '{"cniVersion":"1.0.0","ips":[{"address":"10.88.5.2/24","gateway":"10.88.5.1"}]}'; fi
exit 0
`;

const ENV_TEXT = 'FLANNEL_NETWORK=10.88.0.0/16\nFLANNEL_SUBNET=10.88.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n';

let root: string;
let binDir: string;
let subnetFile: string;
let dataDir: string;

const calls = () =>
  existsSync(join(binDir, 'calls.log'))
    ? readFileSync(join(binDir, 'calls.log'), 'utf8').trim().split('\n').filter(Boolean).map((l) => {
        const [command, id, ifname, conf] = l.split('\t');
        return { command, id, ifname, conf: JSON.parse(conf) };
      })
    : [];

const baseConf = (extra: Record<string, unknown> = {}) => ({
  cniVersion: '1.0.0',
  name: 'podnet',
  type: 'vxlan-flannel',
  subnetFile,
  dataDir,
  subnetWaitMs: 300,
  ...extra,
});

function run(command: string, conf: unknown, id = 'ctr1', ifname = 'eth0') {
  const env = { CNI_COMMAND: command, CNI_CONTAINERID: id, CNI_NETNS: '/var/run/netns/x', CNI_IFNAME: ifname, CNI_PATH: binDir };
  return handle(flannelPlugin, env, () => JSON.stringify(conf)).then((out) => ({ ...out, json: out.stdout ? JSON.parse(out.stdout) : undefined }));
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'flannel-cni-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

let kernel: FakeKernel;
/** The node's VTEPs as the plugin's CHECK and STATUS find them (`ip -json -details addr show`). */
const vtep = (name: string, addrs: { family: string; local: string; prefixlen: number }[], up = true) =>
  FakeKernel.link({ name, mtu: 1450, mac: '0a:00:00:00:00:05', up, addrs, vxlan: { id: 1, local: '192.168.88.5', link: 'eth0', port: 8472, learning: false } });
beforeEach(() => {
  const t = mkdtempSync(join(root, 't-'));
  binDir = join(t, 'bin');
  mkdirSync(binDir);
  writeFileSync(join(binDir, 'bridge'), FAKE);
  chmodSync(join(binDir, 'bridge'), 0o755);
  subnetFile = join(t, 'subnet.env');
  dataDir = join(t, 'data');
  writeFileSync(subnetFile, ENV_TEXT);
  kernel = new FakeKernel().install();
  kernel.links().set('lo', FakeKernel.link({ name: 'lo', kind: 'loopback', mtu: 65536, mac: '00:00:00:00:00:00' }));
  kernel.links().set('flannel.1', vtep('flannel.1', [{ family: 'inet', local: '10.88.5.0', prefixlen: 32 }]));
});
afterEach(() => kernel.uninstall());

describe('delegate rendering (flannel\'s plugin rules)', () => {
  const env = parseSubnetEnv(ENV_TEXT);
  const render = (extra: Record<string, unknown>) => {
    const conf = { ...baseConf(extra) } as never;
    return renderDelegate(conf, loadFlannelConf(conf), env);
  };
  it('defaults: bridge, isGateway, ipMasq = !FLANNEL_IPMASQ, mtu = FLANNEL_MTU, host-local ranges and routes', () => {
    expect(render({})).toEqual({
      cniVersion: '1.0.0',
      name: 'podnet',
      type: 'bridge',
      ipMasq: true,
      mtu: 1450,
      isGateway: true,
      ipam: { type: 'host-local', ranges: [[{ subnet: '10.88.5.0/24' }]], routes: [{ dst: '10.88.0.0/16' }] },
    });
  });
  it('keeps delegate settings, uses ipam as a base, passes runtimeConfig through', () => {
    const d = render({
      delegate: { type: 'bridge', bridge: 'cni9', isGateway: false, ipMasq: false, mtu: 1400, hairpinMode: true },
      ipam: { dataDir: '/tmp/x', routes: [{ dst: '192.0.2.0/24' }] },
      runtimeConfig: { portMappings: [{ hostPort: 80, containerPort: 8080 }] },
    });
    expect(d).toMatchObject({ bridge: 'cni9', isGateway: false, ipMasq: false, mtu: 1400, hairpinMode: true, runtimeConfig: { portMappings: [{ hostPort: 80 }] } });
    expect(d.ipam).toEqual({ dataDir: '/tmp/x', type: 'host-local', ranges: [[{ subnet: '10.88.5.0/24' }]], routes: [{ dst: '192.0.2.0/24' }, { dst: '10.88.0.0/16' }] });
  });
  it('a non-bridge delegate gets no isGateway; dual stack gets a range per family', () => {
    const d = renderDelegate(baseConf({ delegate: { type: 'macvlan' } }) as never, loadFlannelConf(baseConf({ delegate: { type: 'macvlan' } }) as never),
      parseSubnetEnv(ENV_TEXT + 'FLANNEL_IPV6_NETWORK=fd88::/56\nFLANNEL_IPV6_SUBNET=fd88:0:0:5::1/64\n'));
    expect(d.isGateway).toBeUndefined();
    expect((d.ipam as { ranges: unknown }).ranges).toEqual([[{ subnet: '10.88.5.0/24' }], [{ subnet: 'fd88:0:0:5::/64' }]]);
    expect((d.ipam as { routes: unknown }).routes).toEqual([{ dst: '10.88.0.0/16' }, { dst: 'fd88::/56' }]);
  });
});

describe('CNI commands with a fake delegate', () => {
  it('ADD saves the rendered config (0600) before delegating, and returns the delegate\'s result', async () => {
    const out = await run('ADD', baseConf());
    expect(out.exitCode).toBe(0);
    expect(out.json).toMatchObject({ cniVersion: '1.0.0', ips: [{ address: '10.88.5.2/24' }] });
    const saved = join(dataDir, 'podnet:ctr1:eth0');
    expect(statSync(saved).mode & 0o777).toBe(0o600);
    const c = calls();
    expect(c.map((x) => x.command)).toEqual(['ADD']);
    expect(JSON.parse(readFileSync(saved, 'utf8'))).toEqual(c[0].conf);
    expect(c[0].id).toBe('ctr1');
    // flannel's own file too, the same bytes, so that flannel's plugin could DEL it after a downgrade
    const flannels = join(dataDir, 'ctr1');
    expect(readFileSync(flannels, 'utf8')).toBe(readFileSync(saved, 'utf8'));
    expect(statSync(flannels).mode & 0o777).toBe(0o600);
    expect(statSync(dataDir).mode & 0o777).toBe(0o700);
  });
  it('a failed delegate ADD keeps the saved config for the runtime\'s DEL', async () => {
    writeFileSync(join(binDir, 'fail-ADD'), '');
    const out = await run('ADD', baseConf());
    expect([out.exitCode, out.json.code]).toEqual([1, 11]);
    expect(out.json.msg).toMatch(/bridge: fake failure/);
    expect(existsSync(join(dataDir, 'podnet:ctr1:eth0'))).toBe(true);
  });
  it('DEL replays the saved config even after subnet.env changed, then removes it', async () => {
    await run('ADD', baseConf());
    writeFileSync(subnetFile, ENV_TEXT.replace('10.88.5.1/24', '10.88.9.1/24'));
    const out = await run('DEL', baseConf());
    expect(out.exitCode).toBe(0);
    const del = calls()[1];
    expect(del.command).toBe('DEL');
    expect(del.conf.ipam.ranges).toEqual([[{ subnet: '10.88.5.0/24' }]]);
    expect(readdirSync(dataDir)).toEqual([]); // flannel's <containerID> copy went too
  });
  it('a failed delegate DEL keeps the saved config (the retry can still release the IP)', async () => {
    await run('ADD', baseConf());
    writeFileSync(join(binDir, 'fail-DEL'), '');
    const out = await run('DEL', baseConf());
    expect(out.exitCode).toBe(1);
    expect(existsSync(join(dataDir, 'podnet:ctr1:eth0'))).toBe(true);
    expect(readdirSync(dataDir).sort()).toEqual(['ctr1', 'podnet:ctr1:eth0']);
    rmSync(join(binDir, 'fail-DEL'));
    expect((await run('DEL', baseConf())).exitCode).toBe(0);
    expect(readdirSync(dataDir)).toEqual([]);
  });
  it('DEL still works when the config went bad after ADD (only dataDir matters)', async () => {
    await run('ADD', baseConf());
    const out = await run('DEL', baseConf({ delegate: { name: 'now-invalid' }, subnetFile: 'relative' }));
    expect(out.exitCode).toBe(0);
    expect(existsSync(join(dataDir, 'podnet:ctr1:eth0'))).toBe(false);
  });
  it('one container on two flannel networks sharing dataDir (and twice on one): each DEL replays its own attachment\'s config', async () => {
    const a = baseConf({ name: 'net-a' });
    const b = baseConf({ name: 'net-b' });
    expect((await run('ADD', a, 'ctr1', 'eth0')).exitCode).toBe(0);
    expect((await run('ADD', b, 'ctr1', 'net1')).exitCode).toBe(0);
    expect((await run('ADD', a, 'ctr1', 'net2')).exitCode).toBe(0);
    // flannel's <containerID> holds the first attachment's config (net-a), as flannel would have left it
    expect(readdirSync(dataDir).sort()).toEqual(['ctr1', 'net-a:ctr1:eth0', 'net-a:ctr1:net2', 'net-b:ctr1:net1']);
    expect(JSON.parse(readFileSync(join(dataDir, 'ctr1'), 'utf8')).name).toBe('net-a');
    expect((await run('DEL', a, 'ctr1', 'eth0')).exitCode).toBe(0);
    expect((await run('DEL', b, 'ctr1', 'net1')).exitCode).toBe(0);
    // repeated: nothing left for net1, and net-a's copy in <containerID> is not replayed for it
    expect((await run('DEL', b, 'ctr1', 'net1')).exitCode).toBe(0);
    expect((await run('DEL', a, 'ctr1', 'eth0')).exitCode).toBe(0);
    const dels = calls().filter((c) => c.command === 'DEL');
    expect(dels.map((d) => [d.conf.name, d.ifname])).toEqual([['net-a', 'eth0'], ['net-b', 'net1']]);
    // the copy stays while net2, an attachment with the same config, is there
    expect(readdirSync(dataDir).sort()).toEqual(['ctr1', 'net-a:ctr1:net2']);
    // CHECK finds the attachment by network and ifname too
    expect((await run('CHECK', { ...a, prevResult: { cniVersion: '1.0.0' } }, 'ctr1', 'net2')).exitCode).toBe(0);
    expect((await run('CHECK', { ...b, prevResult: { cniVersion: '1.0.0' } }, 'ctr1', 'net2')).json.code).toBe(3);
    expect((await run('DEL', a, 'ctr1', 'net2')).exitCode).toBe(0);
    expect(readdirSync(dataDir)).toEqual([]);
  });
  it('flannel\'s <dataDir>/<containerID> of another network is left alone: neither overwritten by ADD nor removed by DEL', async () => {
    mkdirSync(dataDir, { recursive: true });
    const theirs = JSON.stringify({ cniVersion: '1.0.0', name: 'othernet', type: 'bridge' });
    writeFileSync(join(dataDir, 'ctr1'), theirs);
    expect((await run('ADD', baseConf())).exitCode).toBe(0);
    expect((await run('DEL', baseConf())).exitCode).toBe(0);
    expect(readdirSync(dataDir)).toEqual(['ctr1']);
    expect(readFileSync(join(dataDir, 'ctr1'), 'utf8')).toBe(theirs);
  });
  it('DEL replays flannel\'s <dataDir>/<containerID> of its own network (added before the upgrade), never another network\'s', async () => {
    mkdirSync(dataDir, { recursive: true });
    const legacy = { cniVersion: '1.0.0', name: 'podnet', type: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.88.7.0/24' }]] } };
    writeFileSync(join(dataDir, 'old1'), JSON.stringify(legacy));
    writeFileSync(join(dataDir, 'old2'), JSON.stringify({ ...legacy, name: 'othernet' }));
    expect((await run('DEL', baseConf(), 'old1')).exitCode).toBe(0);
    expect((await run('DEL', baseConf(), 'old2')).exitCode).toBe(0);
    expect(calls().map((c) => [c.command, c.id, c.conf.name])).toEqual([['DEL', 'old1', 'podnet']]);
    expect(readdirSync(dataDir)).toEqual(['old2']);
  });
  it('DEL of an unknown container is success and calls nothing (also without subnet.env)', async () => {
    rmSync(subnetFile);
    const out = await run('DEL', baseConf(), 'never-added');
    expect([out.exitCode, out.stdout]).toEqual([0, '']);
    expect(calls()).toEqual([]);
  });
  it('subnet.env missing: waits the configured time, then code 11 naming the file', async () => {
    rmSync(subnetFile);
    const t0 = Date.now();
    const out = await run('ADD', baseConf({ subnetWaitMs: 400 }));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(380);
    expect([out.exitCode, out.json.code]).toEqual([1, 11]);
    expect(out.json.msg).toContain(`${subnetFile} does not exist`);
    expect(existsSync(dataDir)).toBe(false);
  });
  it('subnet.env appearing during the wait is used', async () => {
    rmSync(subnetFile);
    vi.useFakeTimers({ toFake: ['setTimeout', 'Date'] }); // the wait's clock, moved by the test
    let out: Awaited<ReturnType<typeof run>>;
    try {
      const pending = run('ADD', baseConf({ subnetWaitMs: 3000 }));
      await vi.advanceTimersByTimeAsync(1000); // looked several times: still missing, still waiting
      writeFileSync(subnetFile, ENV_TEXT);
      await vi.advanceTimersByTimeAsync(500); // the next look finds it
      vi.useRealTimers();
      out = await pending;
    } finally {
      vi.useRealTimers();
    }
    expect(out.exitCode, out.stdout).toBe(0);
  });
  it('subnet.env lacking a key: code 11 naming the key', async () => {
    writeFileSync(subnetFile, 'FLANNEL_NETWORK=10.88.0.0/16\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n');
    const out = await run('ADD', baseConf({ subnetWaitMs: 100 }));
    expect(out.json.code).toBe(11);
    expect(out.json.msg).toMatch(/FLANNEL_SUBNET.*is missing/);
  });
  it.each([
    [{ delegate: { name: 'x' } }, 7, /"delegate.name"/],
    [{ delegate: { ipam: {} } }, 7, /"delegate.ipam"/],
    [{ delegate: { type: 5 } }, 7, /"delegate.type"/],
    [{ delegate: { type: 'nope' } }, 7, /"nope" \(field "delegate.type"\) not found/],
    [{ delegate: { isGateway: 'yes' } }, 7, /"delegate.isGateway"/],
    [{ delegate: { mtu: 10 } }, 7, /"delegate.mtu"/],
    [{ delegate: [] }, 7, /"delegate"/],
    [{ ipam: 'host-local' }, 7, /"ipam"/],
    [{ subnetFile: 'relative/subnet.env' }, 7, /"subnetFile"/],
    [{ dataDir: 3 }, 7, /"dataDir"/],
    [{ subnetWaitMs: -1 }, 7, /"subnetWaitMs"/],
    [{ runtimeConfig: 'x' }, 7, /"runtimeConfig"/],
  ])('bad config %j → code %i naming the field, nothing written, no delegate call', async (extra, code, msg) => {
    const out = await run('ADD', baseConf(extra));
    expect([out.exitCode, out.json.code]).toEqual([1, code]);
    expect(out.json.msg).toMatch(msg);
    expect(existsSync(dataDir)).toBe(false);
    expect(calls()).toEqual([]);
  });
  it('a bad value in subnet.env: code 7 naming the file and key', async () => {
    writeFileSync(subnetFile, ENV_TEXT.replace('FLANNEL_MTU=1450', 'FLANNEL_MTU=big'));
    const out = await run('ADD', baseConf());
    expect(out.json.code).toBe(7);
    expect(out.json.msg).toMatch(/subnet.env.*FLANNEL_MTU=big/);
  });
  it('CHECK: the delegate\'s CHECK with prevResult, then the VTEP', async () => {
    await run('ADD', baseConf());
    const prevResult = { cniVersion: '1.0.0', ips: [{ address: '10.88.5.2/24' }] };
    expect((await run('CHECK', baseConf({ prevResult }))).exitCode).toBe(0);
    expect(calls()[1]).toMatchObject({ command: 'CHECK', conf: { prevResult, type: 'bridge' } });
    kernel.links().get('flannel.1')!.up = false;
    const out = await run('CHECK', baseConf({ prevResult }));
    expect(out.exitCode).toBe(1);
    expect(out.json.msg).toMatch(/VTEP flannel.1 is down/);
    const unknown = await run('CHECK', baseConf({ prevResult }), 'other');
    expect(unknown.json.code).toBe(3);
  });
  it('GC removes saved configs of this network\'s stale attachments only, then GCs the delegate', async () => {
    await run('ADD', baseConf(), 'keep');
    await run('ADD', baseConf(), 'keep', 'net1'); // same container, an attachment the runtime no longer has
    await run('ADD', baseConf(), 'stale');
    await run('ADD', baseConf({ name: 'othernet' }), 'foreign');
    // flannel's files, keyed by container only
    writeFileSync(join(dataDir, 'legacy-keep'), JSON.stringify({ name: 'podnet', type: 'bridge' }));
    writeFileSync(join(dataDir, 'legacy-stale'), JSON.stringify({ name: 'podnet', type: 'bridge' }));
    writeFileSync(join(dataDir, 'legacy-foreign'), JSON.stringify({ name: 'othernet', type: 'bridge' }));
    const valid = [{ containerID: 'keep', ifname: 'eth0' }, { containerID: 'legacy-keep', ifname: 'eth0' }];
    const out = await run('GC', { ...baseConf(), cniVersion: '1.1.0', 'cni.dev/valid-attachments': valid });
    expect(out.exitCode).toBe(0);
    // 'keep' and 'foreign' are the <containerID> copies of flannel's format that ADD wrote
    expect(readdirSync(dataDir).sort()).toEqual(['foreign', 'keep', 'legacy-foreign', 'legacy-keep', 'othernet:foreign:eth0', 'podnet:keep:eth0']);
    const gc = calls().at(-1)!;
    expect(gc.command).toBe('GC');
    expect(gc.conf['cni.dev/valid-attachments']).toEqual(valid);
    const missing = await run('GC', { ...baseConf(), cniVersion: '1.1.0' });
    expect(missing.json.code).toBe(7);
  });
  it('GC with cni-ts.dev/stale-attachments removes only the named attachments\' configs and hands the key to the delegate', async () => {
    for (const id of ['keep', 'stale', 'unnamed']) await run('ADD', baseConf(), id);
    writeFileSync(join(dataDir, 'legacy-stale'), JSON.stringify({ name: 'podnet', type: 'bridge' }));
    const valid = [{ containerID: 'keep', ifname: 'eth0' }];
    const stale = [{ containerID: 'stale', ifname: 'eth0' }, { containerID: 'legacy-stale', ifname: '' }];
    const out = await run('GC', { ...baseConf(), cniVersion: '1.1.0', 'cni.dev/valid-attachments': valid, 'cni-ts.dev/stale-attachments': stale });
    expect(out.exitCode, out.stdout).toBe(0);
    expect(readdirSync(dataDir).sort()).toEqual(['keep', 'podnet:keep:eth0', 'podnet:unnamed:eth0', 'unnamed']);
    expect(calls().at(-1)!.conf).toMatchObject({ 'cni.dev/valid-attachments': valid, 'cni-ts.dev/stale-attachments': stale });
  });
  it('STATUS: 50 without subnet.env or VTEP, else the delegate\'s STATUS', async () => {
    const conf = { ...baseConf(), cniVersion: '1.1.0' };
    expect((await run('STATUS', conf)).exitCode).toBe(0);
    expect(calls().at(-1)!.command).toBe('STATUS');
    kernel.links().get('flannel.1')!.up = false;
    const down = await run('STATUS', conf);
    expect([down.json.code, down.json.msg]).toEqual([50, 'overlay not ready: VTEP flannel.1 is down']);
    rmSync(subnetFile);
    const none = await run('STATUS', conf);
    expect(none.json.code).toBe(50);
    expect(none.json.msg).toContain('does not exist');
  });
  it('STATUS on a host-gw node (no flannel VTEP at all: nothing to look at) passes; a flannel VTEP without the address fails', async () => {
    const conf = { ...baseConf(), cniVersion: '1.1.0' };
    const flannel1 = kernel.links().get('flannel.1')!;
    kernel.links().delete('flannel.1');
    expect((await run('STATUS', conf)).exitCode).toBe(0);
    kernel.links().set('flannel.1', flannel1);
    writeFileSync(subnetFile, ENV_TEXT.replace('10.88.5.1/24', '10.88.6.1/24'));
    expect((await run('STATUS', conf)).json.msg).toMatch(/^overlay not ready: no VTEP holds 10\.88\.6\.0\/32/);
  });
  it('VERSION works without any config', async () => {
    const out = await handle(flannelPlugin, { CNI_COMMAND: 'VERSION' }, () => '');
    expect(JSON.parse(out.stdout).supportedVersions).toContain('1.1.0');
  });
});

describe('CHECK and STATUS on a dual-stack or IPv6-only node (flannel-v6.<VNI> holds the IPv6 subnet address /128)', () => {
  const V6 = 'FLANNEL_IPV6_NETWORK=fd88::/56\nFLANNEL_IPV6_SUBNET=fd88:0:0:5::1/64\n';
  const v6Vtep = (up: boolean, local = 'fd88:0:0:5::') =>
    kernel.links().set('flannel-v6.1', vtep('flannel-v6.1', [{ family: 'inet6', local, prefixlen: 128 }, { family: 'inet6', local: 'fe80::1', prefixlen: 64 }], up));
  it('dual stack: both VTEPs are checked', async () => {
    writeFileSync(subnetFile, ENV_TEXT + V6);
    const conf = { ...baseConf(), cniVersion: '1.1.0' };
    const missing = await run('STATUS', conf);
    expect([missing.json.code, missing.json.msg]).toEqual([
      50, 'overlay not ready: no VTEP holds fd88:0:0:5::/128 (the network address of FLANNEL_IPV6_SUBNET fd88:0:0:5::1/64)',
    ]);
    v6Vtep(false);
    expect((await run('STATUS', conf)).json.msg).toBe('overlay not ready: VTEP flannel-v6.1 is down');
    v6Vtep(true, 'FD88:0:0:5:0:0:0:0'); // any spelling of the address
    expect((await run('STATUS', conf)).exitCode).toBe(0);
  });
  it('IPv6 only: the IPv6 VTEP alone', async () => {
    writeFileSync(subnetFile, `${V6}FLANNEL_MTU=1430\nFLANNEL_IPMASQ=false\n`);
    await run('ADD', baseConf());
    const prevResult = { cniVersion: '1.0.0', ips: [{ address: 'fd88:0:0:5::2/64' }] };
    expect((await run('CHECK', baseConf({ prevResult }))).json.msg).toMatch(/no VTEP holds fd88:0:0:5::\/128/);
    v6Vtep(true);
    expect((await run('CHECK', baseConf({ prevResult }))).exitCode).toBe(0);
  });
});
