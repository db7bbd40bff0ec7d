// One network's pool on a real temporary dataDir: the operations the request
// handlers use, and that the index never leads them astray.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NetworkPool } from '../../../src/ipam/network-pool';
import { loadIpamConfig } from '../../../src/ipam/config';
import { parseNetConf } from '../../../src/cni/config';
import { parseCniArgs } from '../../../src/cni/args';
import { CniError } from '../../../src/cni/errors';
import { IP } from '../../../src/net/ip';

let dataDir: string;
const netDir = () => join(dataDir, 'net');
const files = () => (fs.existsSync(netDir()) ? fs.readdirSync(netDir()).sort() : []);
const config = (ranges: object[][] = [[{ subnet: '10.1.0.0/29' }], [{ subnet: 'fd01::/120' }]]) =>
  loadIpamConfig(parseNetConf(JSON.stringify({ cniVersion: '1.1.0', name: 'net', ipam: { dataDir, ranges } })), parseCniArgs(''));
const pool = () => new NetworkPool(config());
const a = { containerId: 'a', ifname: 'eth0' };
const b = { containerId: 'b', ifname: 'eth0' };
const none = new Map<number, IP>();

beforeEach(() => {
  dataDir = fs.mkdtempSync(join(tmpdir(), 'network-pool-'));
  vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => {
  vi.restoreAllMocks();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('NetworkPool', () => {
  it('allocates one address per range set, finds them again, releases them', async () => {
    const got = await pool().allocate(a, config().rangeSets, none);
    expect(got.map((x) => String(x.ip))).toEqual(['10.1.0.2', 'fd01::2']);
    expect((await pool().held(a)).map(String)).toEqual(['10.1.0.2', 'fd01::2']);
    expect((await pool().release(a)).map(String)).toEqual(['10.1.0.2', 'fd01::2']);
    expect(await pool().held(a)).toEqual([]);
    expect(files()).toEqual(['last_reserved_ip.0', 'last_reserved_ip.1', 'lock']);
  });

  it('ADD twice returns the same addresses', async () => {
    const first = await pool().allocate(a, config().rangeSets, none);
    const again = await pool().allocate(a, config().rangeSets, none);
    expect(again.map((x) => String(x.ip))).toEqual(first.map((x) => String(x.ip)));
    expect(files().filter((f) => !f.startsWith('last_') && f !== 'lock')).toHaveLength(2);
  });

  it('sees reservations another program wrote (the Go plugin) and releases them', async () => {
    await pool().allocate(a, config().rangeSets, none);
    fs.writeFileSync(join(netDir(), '10.1.0.5'), 'go-ctr\r\neth0');
    expect((await pool().held({ containerId: 'go-ctr', ifname: 'eth0' })).map(String)).toEqual(['10.1.0.5']);
    expect((await pool().release({ containerId: 'go-ctr', ifname: 'eth0' })).map(String)).toEqual(['10.1.0.5']);
    expect(files()).not.toContain('10.1.0.5');
    expect((await pool().held(a)).map(String)).toEqual(['10.1.0.2', 'fd01::2']);
  });

  it('never trusts the index over the files: an address the index names but a file no longer does is not held', async () => {
    await pool().allocate(a, config().rangeSets, none);
    fs.unlinkSync(join(netDir(), '10.1.0.2'));
    fs.writeFileSync(join(netDir(), '10.1.0.2'), 'b\r\neth0'); // replaced behind our back
    expect((await pool().held(a)).map(String)).toEqual(['fd01::2']);
    expect((await pool().held(b)).map(String)).toEqual(['10.1.0.2']);
  });

  it('rebuilds a damaged index and carries on', async () => {
    await pool().allocate(a, config().rangeSets, none);
    const buckets = join(dataDir, '.cni-ts', 'net', 'index');
    for (const b of fs.readdirSync(buckets)) fs.writeFileSync(join(buckets, b), 'garbage'); // the stamp still says "fresh"
    expect((await pool().release(a)).map(String)).toEqual(['10.1.0.2', 'fd01::2']);
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/rebuilding the index/));
  });

  it('releases legacy files holding only the container ID when nothing else matches', async () => {
    fs.mkdirSync(netDir(), { recursive: true });
    fs.writeFileSync(join(netDir(), '10.1.0.3'), 'a');
    expect((await pool().release(a)).map(String)).toEqual(['10.1.0.3']);
  });

  it('a failed ADD (one set exhausted) leaves the other sets and the index as they were', async () => {
    const tiny = config([[{ subnet: '10.1.0.0/29' }], [{ subnet: '10.2.0.0/30' }]]);
    await new NetworkPool(tiny).allocate(a, tiny.rangeSets, none);
    const before = files().map((f) => [f, fs.readFileSync(join(netDir(), f), 'utf8')]);
    await expect(new NetworkPool(tiny).allocate(b, tiny.rangeSets, none)).rejects.toThrow(CniError);
    expect(files().map((f) => [f, fs.readFileSync(join(netDir(), f), 'utf8')])).toEqual(before);
    expect(await new NetworkPool(tiny).held(b)).toEqual([]);
    expect((await new NetworkPool(tiny).held(a)).map(String)).toEqual(['10.1.0.2', '10.2.0.2']);
  });

  it('collects what the predicate picks, and only that', async () => {
    await pool().allocate(a, config().rangeSets, none);
    await pool().allocate(b, config().rangeSets, none);
    const gone = await pool().collect((r) => r.owner?.containerId === 'b');
    expect(gone.map((r) => String(r.ip)).sort()).toEqual(['10.1.0.3', 'fd01::3']);
    expect(await pool().held(b)).toEqual([]);
    expect((await pool().held(a)).map(String)).toEqual(['10.1.0.2', 'fd01::2']);
  });

  it('reports full range sets', async () => {
    const tiny = config([[{ subnet: '10.1.0.0/29' }], [{ subnet: '10.2.0.0/30' }]]);
    expect(new NetworkPool(tiny).fullRangeSets(tiny.rangeSets)).toEqual([]);
    await new NetworkPool(tiny).allocate(a, tiny.rangeSets, none);
    expect(new NetworkPool(tiny).fullRangeSets(tiny.rangeSets).map((s) => s.index)).toEqual([1]);
  });

  it('without state, DEL, CHECK and GC create nothing', async () => {
    expect(await pool().release(a)).toEqual([]);
    expect(await pool().held(a)).toEqual([]);
    expect(await pool().collect(() => true)).toEqual([]);
    expect(fs.readdirSync(dataDir)).toEqual([]);
  });

  it('says why state cannot be written', () => {
    fs.writeFileSync(join(dataDir, 'file'), '');
    const blocked = new NetworkPool({ dataDir: join(dataDir, 'file'), network: 'net', lockTimeoutMs: 100 });
    expect(blocked.probeWritable()).toMatch(/cannot write state under .*file\/\.cni-ts\/net: ENOTDIR/);
    expect(pool().probeWritable()).toBeUndefined();
  });
});
