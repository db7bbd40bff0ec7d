// The attachment index on a real temporary directory: a cache of "who holds
// what" that must notice every change it did not make itself.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AttachmentIndex, StaleIndexError } from '../../src/ipam/attachment-index';
import { DiskStore } from '../../src/ipam/disk-store';
import { IP } from '../../src/net/ip';

let root: string;
let store: DiskStore;
let index: AttachmentIndex;
const meta = () => join(root, '.cni-ts', 'net');
const ip = (s: string) => IP.parse(s)!;
const a = { containerId: 'a', ifname: 'eth0' };

beforeEach(() => {
  root = fs.mkdtempSync(join(tmpdir(), 'attachment-index-'));
  fs.mkdirSync(meta(), { recursive: true });
  store = new DiskStore(root, 'net', meta());
  store.create();
  index = new AttachmentIndex(meta(), store);
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

describe('AttachmentIndex', () => {
  it('is built from the reservation files on first open', async () => {
    fs.writeFileSync(join(root, 'net', '10.1.0.2'), 'a\r\neth0');
    fs.writeFileSync(join(root, 'net', 'fd00::2'), 'a\r\neth0');
    fs.writeFileSync(join(root, 'net', '10.1.0.3'), 'legacy');
    expect(index.isFresh()).toBe(false);
    await index.open();
    expect(index.isFresh()).toBe(true);
    expect(index.get(a).map(String).sort()).toEqual(['10.1.0.2', 'fd00::2']);
    expect(index.get({ containerId: 'legacy' }).map(String)).toEqual(['10.1.0.3']);
    expect(index.get({ containerId: 'nobody', ifname: 'eth0' })).toEqual([]);
  });

  it('goes stale when anyone else changes the network directory, fresh again once stamped', async () => {
    await index.open();
    fs.writeFileSync(join(root, 'net', '10.1.0.9'), 'go\r\neth0'); // the Go plugin's ADD
    expect(index.isFresh()).toBe(false);
    await index.open();
    expect(index.get({ containerId: 'go', ifname: 'eth0' }).map(String)).toEqual(['10.1.0.9']);
    fs.unlinkSync(join(root, 'net', '10.1.0.9')); // and its DEL
    expect(index.isFresh()).toBe(false);
  });

  it('invalidate() before a change: a crash before stamp() forces a rebuild', async () => {
    await index.open();
    index.invalidate();
    expect(index.isFresh()).toBe(false);
    index.set(a, [ip('10.1.0.2')]);
    index.stamp();
    expect(index.isFresh()).toBe(true);
    expect(index.get(a).map(String)).toEqual(['10.1.0.2']);
    index.set(a, []);
    expect(index.get(a)).toEqual([]);
  });

  it('a damaged entry is reported as stale, not read as "holds nothing"', async () => {
    await index.open();
    index.set(a, [ip('10.1.0.2')]);
    const entries = join(meta(), 'attachments');
    fs.writeFileSync(join(entries, fs.readdirSync(entries)[0]), '{"torn');
    expect(() => index.get(a)).toThrow(StaleIndexError);
  });

  it('names long attachments by a hash, so any valid container ID fits a file name', async () => {
    await index.open();
    const long = { containerId: 'x'.repeat(250), ifname: 'eth0' };
    index.set(long, [ip('10.1.0.2')]);
    expect(fs.readdirSync(join(meta(), 'attachments'))).toEqual([expect.stringMatching(/^#[0-9a-f]{64}$/)]);
    expect(index.get(long).map(String)).toEqual(['10.1.0.2']);
  });
});
