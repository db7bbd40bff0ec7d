// The attachment index on a real temporary directory: a cache of "who holds
// what" that must notice every change it did not make itself.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import fsModule from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';

const realOpen = fsModule.openSync;
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AttachmentIndex, StaleIndexError } from '../../../src/ipam/attachment-index';
import { DiskStore } from '../../../src/ipam/disk-store';
import { IP } from '../../../src/net/ip';
import { waitFor } from '../../support/wait';

let root: string;
let store: DiskStore;
let index: AttachmentIndex;
const meta = () => join(root, '.cni-ts', 'net');
const netDir = () => join(root, 'net');
const ip = (s: string) => IP.parse(s)!;
const a = { containerId: 'a', ifname: 'eth0' };
const buckets = () => fs.readdirSync(join(meta(), 'index'));

beforeEach(() => {
  root = fs.mkdtempSync(join(tmpdir(), 'attachment-index-'));
  fs.mkdirSync(meta(), { recursive: true });
  store = new DiskStore(root, 'net', meta());
  store.create();
  index = new AttachmentIndex(meta(), netDir());
  vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
});
afterEach(() => {
  vi.restoreAllMocks();
  fs.rmSync(root, { recursive: true, force: true });
});

describe('AttachmentIndex', () => {
  it('is built from the reservation files on first open, as a few bucket files', async () => {
    fs.writeFileSync(join(netDir(), '10.1.0.2'), 'a\r\neth0');
    fs.writeFileSync(join(netDir(), 'fd00::2'), 'a\r\neth0');
    fs.writeFileSync(join(netDir(), '10.1.0.3'), 'legacy');
    expect(index.isFresh()).toBe(false);
    await index.open(store);
    index.commit();
    expect(index.isFresh()).toBe(true);
    expect(index.get(a).map(String).sort()).toEqual(['10.1.0.2', 'fd00::2']);
    expect(index.get({ containerId: 'legacy' }).map(String)).toEqual(['10.1.0.3']);
    expect(index.get({ containerId: 'nobody', ifname: 'eth0' })).toEqual([]);
    // a later process reads the saved buckets
    const again = new AttachmentIndex(meta(), netDir());
    expect(again.isFresh()).toBe(true);
    expect(again.get(a).map(String).sort()).toEqual(['10.1.0.2', 'fd00::2']);
    expect(buckets().length).toBeLessThanOrEqual(2);
  });

  it('a rebuild of 20,000 reservations writes 64 files', async () => {
    for (let i = 0; i < 20_000; i++) fs.writeFileSync(join(netDir(), `10.1.${i >> 8}.${i & 255}`), `c${i}\r\neth0`);
    await index.open(store);
    index.commit();
    expect(buckets().length).toBe(64);
    expect(index.get({ containerId: 'c12345', ifname: 'eth0' }).map(String)).toEqual(['10.1.48.57']);
  });

  it('goes stale when anyone else changes the network directory, even at once after our stamp', async () => {
    await index.open(store);
    index.commit();
    fs.writeFileSync(join(netDir(), '10.1.0.9'), 'go\r\neth0'); // the Go plugin's ADD, right after our call
    expect(index.isFresh()).toBe(false);
    await index.open(store);
    index.commit();
    expect(index.get({ containerId: 'go', ifname: 'eth0' }).map(String)).toEqual(['10.1.0.9']);
    fs.unlinkSync(join(netDir(), '10.1.0.9')); // and its DEL
    expect(index.isFresh()).toBe(false);
  });

  it('after another program changed the directory, reads only the files changed since our stamp', async () => {
    for (let i = 0; i < 50; i++) fs.writeFileSync(join(netDir(), `10.1.0.${i + 10}`), `old${i}\r\neth0`);
    index.open(store);
    index.commit();
    // Without the slack given to coarse timestamps (2 s), the files are old as soon as the file clock has ticked past them.
    const newest = Math.max(...fs.readdirSync(netDir()).map((f) => fs.statSync(join(netDir(), f)).ctimeMs));
    const probe = join(root, 'clock');
    await waitFor('the file clock to tick past the files', () => (fs.writeFileSync(probe, ''), fs.statSync(probe).ctimeMs > newest));
    index = new AttachmentIndex(meta(), netDir(), 0);
    index.invalidate(); // a call of ours changes nothing but stamps again: the files are now old
    index.commit();
    // The Go plugin: an ADD, a DEL, and a DEL then an ADD of another container on the same address.
    fs.writeFileSync(join(netDir(), '10.1.0.99'), 'new\r\neth0');
    fs.unlinkSync(join(netDir(), '10.1.0.10'));
    fs.unlinkSync(join(netDir(), '10.1.0.11'));
    fs.writeFileSync(join(netDir(), '10.1.0.11'), 'other\r\neth0');
    const opened: string[] = [];
    const spy = vi.spyOn(fsModule, 'openSync').mockImplementation(((path: string, ...rest: unknown[]) => {
      opened.push(String(path));
      return realOpen(path, ...(rest as [fs.OpenMode]));
    }) as typeof fs.openSync);
    syncBuiltinESMExports();
    const later = new AttachmentIndex(meta(), netDir(), 0);
    try {
      later.open(store);
    } finally {
      spy.mockRestore();
      syncBuiltinESMExports();
    }
    expect(opened.filter((p) => p.startsWith(netDir() + '/')).sort()).toEqual([join(netDir(), '10.1.0.11'), join(netDir(), '10.1.0.99')]);
    expect(later.get({ containerId: 'new', ifname: 'eth0' }).map(String)).toEqual(['10.1.0.99']);
    expect(later.get({ containerId: 'other', ifname: 'eth0' }).map(String)).toEqual(['10.1.0.11']);
    expect(later.get({ containerId: 'old1', ifname: 'eth0' })).toEqual([]);
    expect(later.get({ containerId: 'old2', ifname: 'eth0' }).map(String)).toEqual(['10.1.0.12']);
    later.commit();
    // the lines of the files that went are gone from the saved buckets too
    const saved = buckets().map((b) => fs.readFileSync(join(meta(), 'index', b), 'utf8')).join('');
    expect(saved).not.toMatch(/^10\.1\.0\.10 /m);
    expect(saved).not.toMatch(/ old1 eth0$/m);
  });

  it('a damaged bucket met while reconciling: everything is read again', async () => {
    fs.writeFileSync(join(netDir(), '10.1.0.2'), 'a\r\neth0');
    index.open(store);
    index.commit();
    for (const b of buckets()) fs.writeFileSync(join(meta(), 'index', b), 'garbage');
    fs.writeFileSync(join(netDir(), '10.1.0.3'), 'b\r\neth0'); // another program's change
    const later = new AttachmentIndex(meta(), netDir());
    later.open(store);
    expect(later.get(a).map(String)).toEqual(['10.1.0.2']);
    expect(later.get({ containerId: 'b', ifname: 'eth0' }).map(String)).toEqual(['10.1.0.3']);
  });

  it('stamps the directory with an mtime in the past, which no later change can produce', async () => {
    await index.open(store);
    index.commit();
    const stamped = fs.statSync(netDir()).mtimeMs;
    expect(stamped).toBeLessThan(Date.now() - 900);
    fs.writeFileSync(join(netDir(), '10.1.0.9'), 'go\r\neth0');
    expect(fs.statSync(netDir()).mtimeMs).toBeGreaterThan(stamped);
  });

  it('invalidate() before a change: a crash before commit() forces a rebuild', async () => {
    await index.open(store);
    index.commit();
    index.invalidate();
    expect(index.isFresh()).toBe(false);
    index.set(a, [ip('10.1.0.2')]);
    index.commit();
    expect(index.isFresh()).toBe(true);
    const later = new AttachmentIndex(meta(), netDir());
    expect(later.get(a).map(String)).toEqual(['10.1.0.2']);
    later.invalidate();
    later.set(a, []);
    later.commit();
    expect(new AttachmentIndex(meta(), netDir()).get(a)).toEqual([]);
  });

  it('a damaged bucket is reported as stale, not read as "holds nothing"', async () => {
    await index.open(store);
    index.commit();
    index.invalidate();
    index.set(a, [ip('10.1.0.2')]);
    index.commit();
    const name = buckets()[0];
    fs.writeFileSync(join(meta(), 'index', name), '10.1.0.2 a eth0\n10.1.0.3\n'); // a line without its owner
    expect(() => new AttachmentIndex(meta(), netDir()).get(a)).toThrow(StaleIndexError);
  });

  it('when it cannot be saved, the call goes on with what it read and the next call rebuilds', async () => {
    fs.writeFileSync(join(netDir(), '10.1.0.2'), 'a\r\neth0');
    const full = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', syscall: 'write' });
    // A full disk: every write fails (the spy replaces node:fs's own export, which the ESM view then mirrors).
    const spy = vi.spyOn(fsModule, 'writeFileSync').mockImplementation(() => {
      throw full;
    });
    syncBuiltinESMExports();
    try {
      await index.open(store);
      index.commit();
    } finally {
      spy.mockRestore();
      syncBuiltinESMExports();
    }
    expect(index.get(a).map(String)).toEqual(['10.1.0.2']);
    expect(index.isFresh()).toBe(false);
    expect(process.stderr.write).toHaveBeenCalledWith(expect.stringMatching(/the index was not saved .*the next call rebuilds it/));
  });

  it('leaves out owners no valid request can name (whitespace in a hand-written file)', async () => {
    fs.writeFileSync(join(netDir(), '10.1.0.4'), 'odd id\r\neth0');
    await index.open(store);
    index.commit();
    expect(new AttachmentIndex(meta(), netDir()).get(a)).toEqual([]); // and the buckets still parse
  });
});
