// The Go-format reservation directory, on a real temporary directory.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiskStore, parseOwner, reservationName } from '../../../src/ipam/disk-store';
import { IP } from '../../../src/net/ip';

let root: string;
let store: DiskStore;
const scratch = () => join(root, '.cni-ts', 'net');
const ip = (s: string) => IP.parse(s)!;
const read = (name: string) => fs.readFileSync(join(root, 'net', name), 'utf8');

beforeEach(() => {
  root = fs.mkdtempSync(join(tmpdir(), 'disk-store-'));
  fs.mkdirSync(scratch(), { recursive: true });
  store = new DiskStore(root, 'net', scratch());
  store.create();
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

describe('DiskStore', () => {
  it('writes a reservation in the Go format byte for byte, mode 0600', () => {
    expect(store.reserve(ip('10.1.0.2'), { containerId: 'ctr', ifname: 'eth0' })).toBe(true);
    expect(read('10.1.0.2')).toBe('ctr\r\neth0');
    expect(fs.statSync(join(root, 'net', '10.1.0.2')).mode & 0o777).toBe(0o600);
    expect(store.reserve(ip('fd00::2'), { containerId: 'ctr', ifname: 'eth0' })).toBe(true);
    expect(fs.readdirSync(join(root, 'net')).sort()).toEqual(['10.1.0.2', 'fd00::2']);
  });

  it('refuses an address that is taken, without touching its file', () => {
    fs.writeFileSync(join(root, 'net', '10.1.0.3'), 'go-ctr\r\neth1');
    expect(store.reserve(ip('10.1.0.3'), { containerId: 'ctr', ifname: 'eth0' })).toBe(false);
    expect(read('10.1.0.3')).toBe('go-ctr\r\neth1');
  });

  it('reads owners as Go writes them: free, attachment, legacy ID only, torn', () => {
    fs.writeFileSync(join(root, 'net', '10.1.0.4'), 'a\r\neth0');
    fs.writeFileSync(join(root, 'net', '10.1.0.5'), '  legacy \n');
    fs.writeFileSync(join(root, 'net', '10.1.0.6'), '');
    expect(store.ownerOf(ip('10.1.0.9'))).toBeUndefined();
    expect(store.ownerOf(ip('10.1.0.4'))).toEqual({ containerId: 'a', ifname: 'eth0' });
    expect(store.ownerOf(ip('10.1.0.5'))).toEqual({ containerId: 'legacy' });
    expect(store.ownerOf(ip('10.1.0.6'))).toBeNull();
  });

  it('one call shares one synced scratch file between its reservations, and discards it after', () => {
    const owner = { containerId: 'c', ifname: 'eth0' };
    store.reserve(ip('10.1.0.2'), owner);
    store.reserve(ip('fd00::2'), owner);
    const a = fs.statSync(join(root, 'net', '10.1.0.2'));
    expect(fs.statSync(join(root, 'net', 'fd00::2')).ino).toBe(a.ino);
    store.reserve(ip('10.1.0.3'), { containerId: 'd', ifname: 'eth0' }); // another owner: new content
    expect(read('10.1.0.3')).toBe('d\r\neth0');
    expect(read('10.1.0.2')).toBe('c\r\neth0'); // the earlier links keep their content
    store.discardStaged();
    expect(fs.readdirSync(scratch())).toEqual([]);
  });

  it('release removes the file; a missing one is fine', () => {
    store.reserve(ip('10.1.0.2'), { containerId: 'c', ifname: 'eth0' });
    store.release(ip('10.1.0.2'));
    store.release(ip('10.1.0.2'));
    expect(fs.readdirSync(join(root, 'net'))).toEqual([]);
  });

  it('keeps last_reserved_ip.<N> per range set as a bare address', () => {
    expect(store.lastReserved(0)).toBeUndefined();
    store.setLastReserved(0, ip('10.1.0.7'));
    store.setLastReserved(1, ip('fd00::7'));
    expect(read('last_reserved_ip.0')).toBe('10.1.0.7');
    expect(read('last_reserved_ip.1')).toBe('fd00::7');
    expect(String(store.lastReserved(1))).toBe('fd00::7');
    fs.writeFileSync(join(root, 'net', 'last_reserved_ip.0'), '10.1.0.9\n'); // as a hand edit leaves it
    expect(String(store.lastReserved(0))).toBe('10.1.0.9');
  });

  it('scans reservations only (not lock or last_reserved_ip), flagging torn files', async () => {
    store.reserve(ip('10.1.0.2'), { containerId: 'c', ifname: 'eth0' });
    store.setLastReserved(0, ip('10.1.0.2'));
    fs.writeFileSync(join(root, 'net', 'lock'), '');
    fs.writeFileSync(join(root, 'net', '10.1.0.8'), '');
    for (const name of ['010.1.0.9', '10.1.0', '10.1.0.256', '10.1..9', '10.1.0.9.1', 'fd00:0::9', 'x']) {
      fs.writeFileSync(join(root, 'net', name), 'not an address in canonical form: Go never writes this name');
    }
    const found = store.scan().map((r) => [String(r.ip), r.owner ?? null]).sort();
    expect(found).toEqual([
      ['10.1.0.2', { containerId: 'c', ifname: 'eth0' }],
      ['10.1.0.8', null],
    ]);
  });

  it('scan: a torn file says since when; content longer than the read buffer is read whole', () => {
    fs.writeFileSync(join(root, 'net', '10.1.0.8'), '');
    fs.utimesSync(join(root, 'net', '10.1.0.8'), new Date(5000), new Date(5000));
    const long = 'x'.repeat(5000);
    fs.writeFileSync(join(root, 'net', '10.1.0.9'), `${long}\r\neth0`);
    const byName = new Map(store.scan().map((r) => [r.name, r]));
    expect(byName.get('10.1.0.8')).toMatchObject({ tornSinceMs: 5000 });
    expect(byName.get('10.1.0.8')!.owner).toBeUndefined();
    expect(byName.get('10.1.0.9')!.owner).toEqual({ containerId: long, ifname: 'eth0' });
  });

  it('a missing directory scans as empty', async () => {
    fs.rmSync(join(root, 'net'), { recursive: true });
    expect(store.exists()).toBe(false);
    expect(store.scan()).toEqual([]);
  });
});

describe('the reservation file format', () => {
  it('parses content the way Go compares it (trimmed)', () => {
    expect(parseOwner('id\r\neth0')).toEqual({ containerId: 'id', ifname: 'eth0' });
    expect(parseOwner('id')).toEqual({ containerId: 'id' });
    expect(parseOwner(' \n')).toBeUndefined();
  });

  it('a name is a reservation only in Go canonical form', () => {
    expect(String(reservationName('fd00::1'))).toBe('fd00::1');
    expect(reservationName('fd00:0::1')).toBeUndefined();
    expect(reservationName('last_reserved_ip.0')).toBeUndefined();
  });
});
