// The daemon's reclaim of the attachment files flannel's own plugin leaves:
// its DEL removes <dataDir>/<containerID> and releases the address, not our
// <network>:<containerID>:<ifname>. Removed only when all three signs agree.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RECLAIM_AFTER_MS, reclaimLeftovers } from '../../../../src/flannel/daemon/leftovers';

describe('what flannel\'s plugin left of our attachments', () => {
  let dir: string;
  let dataDir: string;
  let ipamDir: string;
  const now = Date.now();
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'leftovers-'));
    dataDir = join(dir, 'flannel');
    ipamDir = join(dir, 'networks');
    mkdirSync(dataDir);
    mkdirSync(join(ipamDir, 'cbr0'), { recursive: true });
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** Our ADD's files: the attachment's and (unless `copy` is false) flannel's <containerID> copy, written `ageMs` ago. */
  function attach(id: string, opts: { ifname?: string; copy?: boolean; ageMs?: number; ipam?: object; ip?: string } = {}): string {
    const conf = JSON.stringify({ cniVersion: '0.3.1', name: 'cbr0', type: 'bridge', ipam: opts.ipam ?? { type: 'host-local', dataDir: ipamDir, ranges: [[{ subnet: '10.244.1.0/24' }]] } });
    const name = `cbr0:${id}:${opts.ifname ?? 'eth0'}`;
    writeFileSync(join(dataDir, name), conf);
    if (opts.copy !== false) writeFileSync(join(dataDir, id), conf);
    const t = (now - (opts.ageMs ?? 2 * RECLAIM_AFTER_MS)) / 1000;
    utimesSync(join(dataDir, name), t, t);
    if (opts.ip) writeFileSync(join(ipamDir, 'cbr0', opts.ip), `${id}\r\n${opts.ifname ?? 'eth0'}`);
    return name;
  }
  /** What flannel's DEL does to our files: the delegate released the address, then <containerID> goes. */
  function flannelDel(id: string, ip?: string): void {
    if (ip) rmSync(join(ipamDir, 'cbr0', ip));
    rmSync(join(dataDir, id));
  }

  it('removes the file of an attachment flannel\'s plugin deleted, and says why', () => {
    const name = attach('c1', { ip: '10.244.1.2' });
    flannelDel('c1', '10.244.1.2');
    expect(reclaimLeftovers(dataDir, now)).toEqual([
      `removed ${join(dataDir, name)}: container c1 (eth0) was deleted by flannel's own plugin (its c1 file is gone, host-local's ${join(ipamDir, 'cbr0')} holds no address for it)`,
    ]);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('keeps every attachment that may be alive', () => {
    const alive = attach('live', { ip: '10.244.1.2' }); // its copy is there: never DELeted by flannel's plugin
    const young = attach('young', { copy: false, ageMs: 1000 }); // an ADD in progress: no address yet
    const holding = attach('holding', { copy: false, ip: '10.244.1.3' }); // no copy (another attachment had it), address held
    writeFileSync(join(ipamDir, 'cbr0', '10.244.1.4'), 'legacy'); // a legacy reservation names the container only
    const legacy = attach('legacy', { copy: false });
    const otherIpam = attach('dhcp', { copy: false, ipam: { type: 'dhcp' } });
    const unreadable = attach('gone-dir', { copy: false, ipam: { type: 'host-local', dataDir: join(dir, 'not-mounted') } });
    expect(reclaimLeftovers(dataDir, now)).toEqual([]);
    for (const f of [alive, young, holding, legacy, otherIpam, unreadable]) expect(existsSync(join(dataDir, f)), f).toBe(true);
  });

  it('a directory that does not exist is nothing to do', () => {
    expect(reclaimLeftovers(join(dir, 'none'), now)).toEqual([]);
  });
});
