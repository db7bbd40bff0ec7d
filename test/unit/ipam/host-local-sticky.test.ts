// ipam.stickyTTL in-process: a deleted pod's addresses are parked for it, come
// back when the pod is recreated, and go to others only when nothing else is free.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runHostLocal as run, withNoSpace } from './host-local-harness';
import { listReservations } from '../../../src/ipam/ls';
import { ParkingLot } from '../../../src/ipam/parking-lot';
import { IP } from '../../../src/net/ip';

let dataDir: string;
const netDir = () => join(dataDir, 'sticky');
const reserved = () => (fs.existsSync(netDir()) ? fs.readdirSync(netDir()).filter((f) => f !== 'lock' && !f.startsWith('last_')).sort() : []);
const read = (name: string) => fs.readFileSync(join(netDir(), name), 'utf8');
const HOUR = 3_600_000;

const conf = (ipam: object = {}) => ({
  cniVersion: '1.1.0',
  name: 'sticky',
  type: 'bridge',
  ipam: { type: 'host-local', dataDir, stickyTTL: '1h', ranges: [[{ subnet: '10.5.0.0/29' }], [{ subnet: 'fd05::/125' }]], ...ipam },
});
const pod = (name: string, ns = 'default') => `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=x`;
const ips = (r: { json: any }) => r.json.ips.map((i: any) => i.address.split('/')[0]);

beforeEach(() => {
  dataDir = fs.mkdtempSync(join(tmpdir(), 'sticky-'));
  vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => {
  vi.restoreAllMocks();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('stickyTTL', () => {
  it('DEL parks the addresses; the recreated pod (a new container ID) gets them back in every range set', async () => {
    const first = await run('ADD', conf(), 'ctr-1', 'eth0', pod('web-0'));
    expect(ips(first)).toEqual(['10.5.0.2', 'fd05::2']);
    await run('ADD', conf(), 'other', 'eth0', pod('other'));
    expect((await run('DEL', conf(), 'ctr-1', 'eth0', pod('web-0'))).exitCode).toBe(0);
    // still reserved on disk, in the Go format, naming the deleted container: the Go plugin reads them as taken
    expect(read('10.5.0.2')).toBe('ctr-1\r\neth0');
    expect((await run('CHECK', conf(), 'ctr-1', 'eth0', pod('web-0'))).exitCode).toBe(1); // it holds nothing now
    const again = await run('ADD', conf(), 'ctr-2', 'eth0', pod('web-0'));
    expect(ips(again)).toEqual(['10.5.0.2', 'fd05::2']);
    expect(read('10.5.0.2')).toBe('ctr-2\r\neth0');
    expect(fs.readdirSync(join(dataDir, '.cni-ts', 'sticky', 'parked')).filter((f) => f !== 'next-expiry')).toEqual([]);
    expect((await run('CHECK', conf(), 'ctr-2', 'eth0', pod('web-0'))).exitCode).toBe(0);
  });

  it('other ADDs get a free address while one is free, then the oldest parked one', async () => {
    const one = conf({ ranges: [[{ subnet: '10.5.0.0/29' }]] }); // .1 gateway, .2 to .6
    for (const name of ['a', 'b', 'c']) await run('ADD', one, `ctr-${name}`, 'eth0', pod(name)); // .2 .3 .4
    const now = Date.now();
    const clock = vi.spyOn(Date, 'now');
    clock.mockReturnValue(now);
    await run('DEL', one, 'ctr-b', 'eth0', pod('b')); // .3 parked first
    clock.mockReturnValue(now + 1000);
    await run('DEL', one, 'ctr-a', 'eth0', pod('a')); // .2 parked later
    expect(ips(await run('ADD', one, 'ctr-d', 'eth0', pod('d')))).toEqual(['10.5.0.5']);
    expect(ips(await run('ADD', one, 'ctr-e', 'eth0', pod('e')))).toEqual(['10.5.0.6']);
    const full = await run('ADD', one, 'ctr-f', 'eth0', pod('f'));
    expect(ips(full)).toEqual(['10.5.0.3']); // the full network still works: b's, parked longest
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/10.5.0.3 parked for pod default\/b handed out: no other address was free/));
    // a comes back to its own address; b's was handed out, and nothing is left for it
    expect(ips(await run('ADD', one, 'ctr-a2', 'eth0', pod('a')))).toEqual(['10.5.0.2']);
    expect((await run('ADD', one, 'ctr-b2', 'eth0', pod('b'))).json).toMatchObject({ code: 50 });
  });

  it('a parking is found only by the pod and interface it names ("a/b" + "c" is not "a" + "b/c")', () => {
    const lot = new ParkingLot(join(dataDir, 'meta'));
    const parked = { attachment: { containerId: 'c1', ifname: 'primary' }, ips: [IP.parse('10.5.0.2')!], parkedAt: 1, expiresAt: Date.now() + HOUR };
    lot.save({ ...parked, pod: { namespace: 'team-a/db', name: 'primary' } });
    lot.save({ ...parked, pod: { namespace: 'team-b', name: 'db' } });
    expect(lot.get({ namespace: 'team-a', name: 'db/primary' }, 'primary')).toBeUndefined();
    expect(lot.get({ namespace: 'team-a/db', name: 'primary' }, 'primary')?.pod).toEqual({ namespace: 'team-a/db', name: 'primary' });
    // a record under a pod's key that names another pod (copied there by hand, or an older key) is not that pod's
    const dir = join(dataDir, 'meta', 'parked');
    const teamB = fs.readdirSync(dir).find((f) => f !== 'next-expiry' && fs.readFileSync(join(dir, f), 'utf8').includes('"team-b"'))!;
    lot.remove({ ...parked, pod: { namespace: 'team-b', name: 'db' } });
    lot.save({ ...parked, pod: { namespace: 'team-c', name: 'db' } });
    const teamC = fs.readdirSync(dir).find((f) => f !== 'next-expiry')!;
    fs.renameSync(join(dir, teamC), join(dir, teamB));
    expect(lot.get({ namespace: 'team-b', name: 'db' }, 'primary')).toBeUndefined();
  });

  it('takes any pod name CNI_ARGS can carry, as the Go host-local does (podman\'s crazy_antonelli, a "/", a control character): each is its own pod', async () => {
    const one = conf({ ranges: [[{ subnet: '10.5.0.0/29' }]] });
    const pods = [
      ['default', 'crazy_antonelli'], // podman's random container names
      ['team-a', 'db/primary'],
      ['team-a/db', 'primary'], // printed alike without quotes: told apart all the same
      ['x'.repeat(64), 'Web_0'],
      ['default', 'web\x01'],
    ];
    const args = (ns: string, name: string) => `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name}`;
    const first: string[] = [];
    for (const [i, [ns, name]] of pods.entries()) {
      const r = await run('ADD', one, `ctr-${i}`, 'eth0', args(ns, name));
      expect(r.exitCode, `${ns}/${name}: ${JSON.stringify(r.json)}`).toBe(0);
      first.push(ips(r)[0]);
    }
    for (const [i, [ns, name]] of pods.entries()) expect((await run('DEL', one, `ctr-${i}`, 'eth0', args(ns, name))).exitCode).toBe(0);
    // who each address is parked for, as `host-local ls` prints it: quoted where a name is not plain
    const rows = await listReservations(dataDir, join(dataDir, 'no-conf'));
    expect(rows.map((r) => r.parkedFor).sort()).toEqual(['"team-a/db"/primary', `${'x'.repeat(64)}/Web_0`, 'default/"web\\u0001"', 'default/crazy_antonelli', 'team-a/"db/primary"'].sort());
    // recreated in the other order, each gets back exactly its own address
    for (const [i, [ns, name]] of [...pods.entries()].reverse()) expect(ips(await run('ADD', one, `new-${i}`, 'eth0', args(ns, name)))).toEqual([first[i]]);
  });

  it('a requested address parked for another pod is refused, naming the pod and when the parking ends', async () => {
    await run('ADD', conf(), 'ctr-1', 'eth0', pod('web-0', 'prod'));
    const now = Date.now();
    vi.spyOn(Date, 'now').mockReturnValue(now);
    await run('DEL', conf(), 'ctr-1', 'eth0', pod('web-0', 'prod'));
    const r = await run('ADD', conf(), 'ctr-x', 'eth0', `${pod('intruder')};IP=10.5.0.2`);
    expect(r.json).toMatchObject({
      code: 11,
      msg: `requested IP 10.5.0.2 is parked for pod prod/web-0 until ${new Date(now + HOUR).toISOString()} (range set 10.5.0.1-10.5.0.6)`,
    });
    // the pod itself may ask for it
    expect(ips(await run('ADD', conf(), 'ctr-2', 'eth0', `${pod('web-0', 'prod')};IP=10.5.0.2`))).toEqual(['10.5.0.2', 'fd05::2']);
  });

  it('an attachment without K8S_POD_* is never parked; without stickyTTL nothing is parked', async () => {
    await run('ADD', conf(), 'bare');
    await run('DEL', conf(), 'bare');
    await run('ADD', conf({ stickyTTL: undefined }), 'plain', 'eth0', pod('p'));
    await run('DEL', conf({ stickyTTL: undefined }), 'plain', 'eth0', pod('p'));
    expect(reserved()).toEqual([]);
  });

  it('a parking ends lazily at its TTL: any later call releases it', async () => {
    await run('ADD', conf(), 'ctr-1', 'eth0', pod('web-0'));
    const now = Date.now();
    const clock = vi.spyOn(Date, 'now').mockReturnValue(now);
    await run('DEL', conf(), 'ctr-1', 'eth0', pod('web-0'));
    clock.mockReturnValue(now + HOUR - 1);
    await run('DEL', conf(), 'unrelated');
    expect(reserved()).toEqual(['10.5.0.2', 'fd05::2']);
    clock.mockReturnValue(now + HOUR);
    await run('DEL', conf(), 'unrelated');
    expect(reserved()).toEqual([]);
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/the parking of 10.5.0.2, fd05::2 for pod default\/web-0 ended; released/));
    // and the pod, back later, gets the next address
    expect(ips(await run('ADD', conf(), 'ctr-2', 'eth0', pod('web-0')))).toEqual(['10.5.0.3', 'fd05::3']);
  });

  it('GC keeps parked addresses (not leaks) and releases ended parkings', async () => {
    await run('ADD', conf(), 'ctr-1', 'eth0', pod('web-0'));
    await run('ADD', conf(), 'gone', 'eth0', pod('gone'));
    const now = Date.now();
    const clock = vi.spyOn(Date, 'now').mockReturnValue(now);
    await run('DEL', conf(), 'ctr-1', 'eth0', pod('web-0'));
    const gc = { ...conf(), 'cni.dev/valid-attachments': [] };
    expect((await run('GC', gc)).exitCode).toBe(0);
    expect(reserved()).toEqual(['10.5.0.2', 'fd05::2']); // "gone" (not valid) released, the parked ones kept
    clock.mockReturnValue(now + 2 * HOUR);
    await run('GC', gc);
    expect(reserved()).toEqual([]);
  });

  it('GC with cni-ts.dev/stale-attachments releases a parking only when it names the parking attachment (repair\'s DEL of a stale attachment parks it)', async () => {
    await run('ADD', conf(), 'stale-ctr', 'eth0', pod('web-0'));
    await run('ADD', conf(), 'parked-ctr', 'eth0', pod('web-1'));
    await run('DEL', conf(), 'stale-ctr', 'eth0', pod('web-0'));
    await run('DEL', conf(), 'parked-ctr', 'eth0', pod('web-1'));
    const gc = { ...conf(), 'cni.dev/valid-attachments': [], 'cni-ts.dev/stale-attachments': [{ containerID: 'stale-ctr', ifname: 'eth0' }] };
    expect((await run('GC', gc)).exitCode).toBe(0);
    expect(reserved().map(read)).toEqual(['parked-ctr\r\neth0', 'parked-ctr\r\neth0']);
    const records = fs.readdirSync(join(dataDir, '.cni-ts', 'sticky', 'parked')).filter((f) => f !== 'next-expiry');
    expect(records).toHaveLength(1);
    // the pod whose parking went gets the next free address when it comes back
    expect(ips(await run('ADD', conf(), 'new-ctr', 'eth0', pod('web-0')))).toEqual(['10.5.0.4', 'fd05::4']);
  });

  it('a repeated DEL of the parked attachment changes nothing, and a rebuilt index still leaves it holding nothing', async () => {
    await run('ADD', conf(), 'ctr-1', 'eth0', pod('web-0'));
    await run('DEL', conf(), 'ctr-1', 'eth0', pod('web-0'));
    await run('DEL', conf(), 'ctr-1', 'eth0'); // a retry, even without the pod
    expect(reserved()).toEqual(['10.5.0.2', 'fd05::2']);
    fs.rmSync(join(dataDir, '.cni-ts', 'sticky', 'index'), { recursive: true });
    fs.rmSync(join(dataDir, '.cni-ts', 'sticky', 'stamp'));
    expect((await run('CHECK', conf(), 'ctr-1', 'eth0')).exitCode).toBe(1);
    await run('DEL', conf(), 'ctr-1', 'eth0');
    expect(reserved()).toEqual(['10.5.0.2', 'fd05::2']);
  });

  it('STATUS counts parked addresses as available; ls shows them with pod and end', async () => {
    const tiny = conf({ ranges: [[{ subnet: '10.5.0.0/30' }]] }); // one address
    await run('ADD', tiny, 'ctr-1', 'eth0', pod('web-0'));
    expect((await run('STATUS', tiny)).json).toMatchObject({ code: 50 });
    const now = Date.now();
    vi.spyOn(Date, 'now').mockReturnValue(now);
    await run('DEL', tiny, 'ctr-1', 'eth0', pod('web-0'));
    expect((await run('STATUS', tiny)).exitCode).toBe(0);
    const rows = await listReservations(dataDir, join(dataDir, 'no-conf'));
    expect(rows).toEqual([
      { network: 'sticky', ip: '10.5.0.2', containerID: 'ctr-1', ifname: 'eth0', rangeSet: null, rangeSetUnknown: `cannot read --conf-dir ${join(dataDir, 'no-conf')}: ENOENT (no such file or directory)`, torn: false, parkedFor: 'default/web-0', parkedUntil: new Date(now + HOUR).toISOString() },
    ]);
  });

  it('on a full filesystem DEL releases instead of parking, and exits 0', async () => {
    await run('ADD', conf(), 'ctr-1', 'eth0', pod('web-0'));
    const del = await withNoSpace(() => run('DEL', conf(), 'ctr-1', 'eth0', pod('web-0')));
    expect(del.exitCode, del.stdout).toBe(0);
    expect(reserved()).toEqual([]);
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/cannot park 10.5.0.2, fd05::2 for pod default\/web-0 \(ENOSPC .*\); releasing them instead/));
  });

  it('stickyTTL must be a duration', async () => {
    for (const bad of ['1d', '10', '-5m', '0s', '9000h', 30]) {
      const r = await run('ADD', conf({ stickyTTL: bad }), 'x', 'eth0', pod('p'));
      expect(r.json).toMatchObject({ code: 7, msg: expect.stringMatching(/field "ipam.stickyTTL" must be a (duration|string)/) });
    }
    expect((await run('ADD', conf({ stickyTTL: '1h30m15s' }), 'x', 'eth0', pod('p'))).exitCode).toBe(0);
  });
});
