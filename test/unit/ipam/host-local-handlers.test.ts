// host-local's request handlers in-process, through the same CNI boundary the
// executable uses (skel.handle: env + stdin in, printed output and exit code
// out), against a temporary dataDir, as the Go plugin's host_local_test.go
// drives cmdAdd/cmdDel. The integration tests run the built executable.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runHostLocal, withNoSpace } from './host-local-harness';

let tmp: string;
let dataDir: string;
const netDir = () => join(dataDir, 'mynet');
const files = () => (fs.existsSync(netDir()) ? fs.readdirSync(netDir()).sort() : []);
const read = (name: string) => fs.readFileSync(join(netDir(), name), 'utf8');

function conf(extra: object = {}, ipam: object = {}) {
  return {
    cniVersion: '1.1.0',
    name: 'mynet',
    type: 'bridge',
    ipam: {
      type: 'host-local',
      dataDir,
      ranges: [[{ subnet: '10.1.2.0/24' }, { subnet: '10.2.2.0/24' }], [{ subnet: '2001:db8:1::/64' }]],
      routes: [{ dst: '0.0.0.0/0' }, { dst: '192.168.0.0/16', gw: '1.1.1.1' }],
      ...ipam,
    },
    ...extra,
  };
}

const run = runHostLocal;

beforeEach(() => {
  tmp = fs.mkdtempSync(join(tmpdir(), 'host-local-'));
  dataDir = join(tmp, 'data');
  vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => {
  vi.restoreAllMocks();
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('ADD and DEL', () => {
  it.each(['0.3.1', '0.4.0', '1.0.0', '1.1.0'])('[%s] allocates and releases, in the Go format byte for byte', async (v) => {
    fs.writeFileSync(join(tmp, 'resolv.conf'), 'nameserver 192.0.2.3');
    const c = conf({ cniVersion: v }, { resolvConf: join(tmp, 'resolv.conf') });
    const add = await run('ADD', c);
    expect(add.exitCode, add.stdout).toBe(0);
    const hasVersion = !v.startsWith('1.');
    expect(add.json.ips).toEqual([
      { ...(hasVersion ? { version: '4' } : {}), address: '10.1.2.2/24', gateway: '10.1.2.1' },
      { ...(hasVersion ? { version: '6' } : {}), address: '2001:db8:1::2/64', gateway: '2001:db8:1::1' },
    ]);
    expect(add.json.routes).toEqual([{ dst: '0.0.0.0/0' }, { dst: '192.168.0.0/16', gw: '1.1.1.1' }]);
    expect(add.json.dns).toEqual({ nameservers: ['192.0.2.3'] });
    expect(read('10.1.2.2')).toBe('dummy\r\neth0');
    expect(read('2001:db8:1::2')).toBe('dummy\r\neth0');
    expect(read('last_reserved_ip.0')).toBe('10.1.2.2');
    expect(read('last_reserved_ip.1')).toBe('2001:db8:1::2');

    const del = await run('DEL', c);
    expect(del).toMatchObject({ exitCode: 0, stdout: '' });
    expect(files()).toEqual(['last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('[0.1.0] prints ip4/ip6', async () => {
    const add = await run('ADD', conf({ cniVersion: '0.1.0' }));
    expect(add.json.ip4).toEqual({ ip: '10.1.2.2/24', gateway: '10.1.2.1', routes: [{ dst: '0.0.0.0/0' }, { dst: '192.168.0.0/16', gw: '1.1.1.1' }] });
    expect(add.json.ip6).toEqual({ ip: '2001:db8:1::2/64', gateway: '2001:db8:1::1' });
  });

  it('keeps interfaces of one container apart, and DEL releases by interface', async () => {
    await run('ADD', conf(), 'dummy', 'eth0');
    await run('ADD', conf(), 'dummy', 'eth1');
    expect(read('10.1.2.3')).toBe('dummy\r\neth1');
    await run('DEL', conf(), 'dummy', 'eth0');
    expect(files().filter((f) => !f.startsWith('last_') && f !== 'lock')).toEqual(['10.1.2.3', '2001:db8:1::3']);
  });

  it('continues the round-robin from last_reserved_ip, as the reference does', async () => {
    fs.mkdirSync(netDir(), { recursive: true });
    fs.writeFileSync(join(netDir(), 'last_reserved_ip.0'), '10.1.2.254');
    const add = await run('ADD', conf());
    expect(add.json.ips[0].address).toBe('10.2.2.2/24'); // wrapped into the next range, past its gateway
  });

  it('takes a requested address from CNI_ARGS; taken, it is code 11 naming the holder', async () => {
    const first = await run('ADD', conf(), 'a', 'eth0', 'IP=10.1.2.77');
    expect(first.json.ips[0].address).toBe('10.1.2.77/24');
    const second = await run('ADD', conf(), 'b', 'eth0', 'IP=10.1.2.77');
    expect(second.exitCode).toBe(1);
    expect(second.json).toMatchObject({ code: 11, msg: expect.stringMatching(/10.1.2.77 is already reserved by container a \(eth0\)/) });
    expect(files().filter((f) => f.startsWith('10.'))).toEqual(['10.1.2.77']);
  });

  it('an attachment asking for another address than the one it holds is code 7', async () => {
    await run('ADD', conf(), 'a', 'eth0', 'IP=10.1.2.77');
    const again = await run('ADD', conf(), 'a', 'eth0', 'IP=10.1.2.78');
    expect(again.json).toMatchObject({ code: 7, msg: expect.stringMatching(/already holds 10.1.2.77 .* requested 10.1.2.78/) });
  });

  it('an exhausted range set is code 50, as STATUS says for it', async () => {
    const tiny = conf({}, { ranges: [[{ subnet: '10.9.0.0/30' }]] });
    await run('ADD', tiny, 'a');
    const r = await run('ADD', tiny, 'b');
    expect(r.json).toMatchObject({ code: 50, msg: 'no IP addresses available in range set 10.9.0.1-10.9.0.2' });
  });

  it('a network name longer than a file name may be is code 7, and nothing is written', async () => {
    const r = await run('ADD', conf({ name: 'n'.repeat(256) }));
    expect(r.json).toMatchObject({ code: 7, msg: expect.stringMatching(/network name \(field "name"\) is 256 bytes/) });
    const deep = await run('ADD', conf({}, { dataDir: join(dataDir, ...Array(17).fill('d'.repeat(250))) }));
    expect(deep.json).toMatchObject({ code: 7, msg: expect.stringMatching(/field "ipam.dataDir" is too long/) });
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  it('accepts the K8S_POD_* keys runtimes pass in CNI_ARGS; other keys still need IgnoreUnknown', async () => {
    const k8s = 'K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u1';
    expect((await run('ADD', conf(), 'k', 'eth0', k8s)).exitCode).toBe(0);
    expect((await run('ADD', conf(), 'l', 'eth0', `${k8s};FOO=1`)).json).toMatchObject({ code: 4, msg: expect.stringMatching(/FOO/) });
  });

  it('DEL of nothing succeeds and creates nothing', async () => {
    expect(await run('DEL', conf())).toMatchObject({ exitCode: 0, stdout: '' });
    expect(fs.existsSync(dataDir)).toBe(false);
  });
});

describe('a full filesystem', () => {
  it('DEL releases and exits 0: releasing never needs free space', async () => {
    await run('ADD', conf(), 'a');
    await run('ADD', conf(), 'b');
    const del = await withNoSpace(() => run('DEL', conf(), 'a'));
    expect(del, del.stdout).toMatchObject({ exitCode: 0, stdout: '' });
    expect(files().filter((f) => !f.startsWith('last_') && f !== 'lock')).toEqual(['10.1.2.3', '2001:db8:1::3']);
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/the index was not saved .*ENOSPC/));
    // and the next call, with room again, rebuilds and finds the rest
    expect((await run('DEL', conf(), 'b')).exitCode).toBe(0);
    expect(files()).toEqual(['last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('an ADD fails with code 5 naming the file and the cause, and leaves no reservation', async () => {
    await run('ADD', conf(), 'a');
    const before = files().map((f) => [f, read(f)]);
    const add = await withNoSpace(() => run('ADD', conf(), 'b'));
    expect(add.json).toMatchObject({ code: 5, msg: `cannot write ${join(dataDir, '.cni-ts', 'mynet', 'reservation.tmp')}: ENOSPC (no space left on device)` });
    expect(files().map((f) => [f, read(f)])).toEqual(before);
  });
});

describe('CHECK', () => {
  it('passes for the attachment holding prevResult, fails otherwise', async () => {
    const add = await run('ADD', conf());
    expect((await run('CHECK', conf({ prevResult: add.json }))).exitCode).toBe(0);
    const other = await run('CHECK', conf(), 'stranger');
    expect(other.exitCode).toBe(1);
    expect(other.json.msg).toMatch(/no address is reserved for stranger \(eth0\) in network mynet/);
  });
});

describe('GC', () => {
  it('releases attachments not listed as valid, keeps the listed ones and the bookkeeping files', async () => {
    await run('ADD', conf(), 'keep');
    await run('ADD', conf(), 'drop');
    fs.writeFileSync(join(netDir(), 'lock'), '');
    const gc = await run('GC', conf({ 'cni.dev/valid-attachments': [{ containerID: 'keep', ifname: 'eth0' }] }));
    expect(gc.exitCode, gc.stdout).toBe(0);
    expect(files()).toEqual(['10.1.2.2', '2001:db8:1::2', 'last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/GC released 10.1.2.3 \(drop \(eth0\)\)/));
  });

  it('with cni-ts.dev/stale-attachments releases only the named attachments that are not valid; a legacy file goes with its container', async () => {
    const single = conf({}, { ranges: [[{ subnet: '10.1.2.0/24' }]] });
    for (const id of ['keep', 'stale', 'unnamed', 'named-but-valid']) expect((await run('ADD', single, id)).exitCode).toBe(0);
    fs.writeFileSync(join(netDir(), '10.1.2.50'), 'legacy-stale');
    fs.writeFileSync(join(netDir(), '10.1.2.51'), 'legacy-unnamed');
    const gc = await run(
      'GC',
      conf({
        'cni.dev/valid-attachments': [{ containerID: 'keep', ifname: 'eth0' }, { containerID: 'named-but-valid', ifname: 'eth0' }],
        'cni-ts.dev/stale-attachments': [{ containerID: 'stale', ifname: 'eth0' }, { containerID: 'legacy-stale', ifname: '' }, { containerID: 'named-but-valid', ifname: 'eth0' }],
      }),
    );
    expect(gc.exitCode, gc.stdout).toBe(0);
    const holders = files().filter((f) => f.startsWith('10.')).map((f) => read(f).split('\r\n')[0]).sort();
    expect(holders).toEqual(['keep', 'legacy-unnamed', 'named-but-valid', 'unnamed']);
  });

  it('refuses a stale list that is not a list of attachments (code 7), releasing nothing', async () => {
    await run('ADD', conf(), 'a');
    const gc = await run('GC', conf({ 'cni.dev/valid-attachments': [], 'cni-ts.dev/stale-attachments': [{ containerID: 'a' }] }));
    expect(gc.json).toMatchObject({ code: 7, msg: 'field "cni-ts.dev/stale-attachments[0]" must be an object with string "containerID" and "ifname"' });
    expect(files().filter((f) => f.startsWith('10.'))).toHaveLength(1);
  });
});

describe('STATUS', () => {
  it('answers 50 once a range set is full', async () => {
    const tiny = conf({}, { ranges: [[{ subnet: '10.9.0.0/30' }]] });
    expect((await run('STATUS', tiny)).exitCode).toBe(0);
    await run('ADD', tiny);
    const full = await run('STATUS', tiny);
    expect(full.json).toMatchObject({ code: 50, msg: expect.stringMatching(/no free addresses in range set 10.9.0.1-10.9.0.2/) });
  });
});
