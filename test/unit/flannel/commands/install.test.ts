// The init containers' subcommands (src/flannel/commands/install.ts) on a
// temp directory: atomic replacement (a reader holding the old file keeps
// it), same bytes left alone, bad input refused with nothing changed.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chmodSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, readdirSync, rmSync, statSync, writeFileSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installConf, installPlugin } from '../../../../src/flannel/commands/install';

describe('install-plugin and install-conf', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'install-'));
    mkdirSync(join(dir, 'bin'));
    mkdirSync(join(dir, 'net.d'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('install-plugin: a copy per name, executable, replaced by rename (an open old file keeps its bytes), the same bytes left alone', () => {
    const exe = join(dir, 'vxlan-flannel');
    writeFileSync(exe, 'NEW'.repeat(400_000)); // more than one compare chunk
    chmodSync(exe, 0o700);
    writeFileSync(join(dir, 'bin', 'flannel'), 'OLD flannel');
    const running = openSync(join(dir, 'bin', 'flannel'), 'r'); // "a kubelet runs the old one"
    expect(installPlugin(exe, join(dir, 'bin'), ['flannel', 'bridge'])).toEqual([`installed ${dir}/bin/flannel`, `installed ${dir}/bin/bridge`]);
    const buf = Buffer.alloc(11);
    readSync(running, buf, 0, 11, 0);
    closeSync(running);
    expect(buf.toString()).toBe('OLD flannel');
    for (const n of ['flannel', 'bridge']) {
      expect(readFileSync(join(dir, 'bin', n), 'utf8')).toBe('NEW'.repeat(400_000));
      expect(statSync(join(dir, 'bin', n)).mode & 0o777).toBe(0o755);
      expect(statSync(join(dir, 'bin', n)).nlink).toBe(1); // never hard-linked: a later `cp -f` over one must not rewrite the other
    }
    const ino = statSync(join(dir, 'bin', 'flannel')).ino;
    expect(installPlugin(exe, join(dir, 'bin'), ['flannel'])).toEqual([`${dir}/bin/flannel is up to date`]);
    expect(statSync(join(dir, 'bin', 'flannel')).ino).toBe(ino);
    expect(readdirSync(join(dir, 'bin')).sort()).toEqual(['bridge', 'flannel']); // no temp file left
  });

  it('install-plugin refuses a name that is not ours, a missing executable or destination, and changes nothing', () => {
    const exe = join(dir, 'vxlan-flannel');
    writeFileSync(exe, 'x');
    expect(() => installPlugin(exe, join(dir, 'bin'), ['flannel', '../evil'])).toThrow('plugin name "../evil" is not one of flannel, bridge, host-local, vxlan-flannel');
    expect(() => installPlugin(join(dir, 'none'), join(dir, 'bin'), ['flannel'])).toThrow(/^cannot read the plugin executable .*none: ENOENT/);
    expect(() => installPlugin(exe, join(dir, 'nope'), ['flannel'])).toThrow(`${dir}/nope is not a directory (mount the host's CNI bin directory there)`);
    expect(readdirSync(join(dir, 'bin'))).toEqual([]);
  });

  it('install-conf: kube-flannel\'s cni-conf.json written atomically, 0644; the same text left alone; a bad one refused naming the field, the old one kept', () => {
    const src = join(dir, 'cni-conf.json');
    const dest = join(dir, 'net.d', '10-flannel.conflist');
    const conf = '{\n  "name": "cbr0",\n  "cniVersion": "0.3.1",\n  "plugins": [\n    { "type": "flannel", "delegate": { "hairpinMode": true, "isDefaultGateway": true } },\n    { "type": "portmap", "capabilities": { "portMappings": true } }\n  ]\n}\n';
    writeFileSync(src, conf);
    expect(installConf(src, dest)).toBe(`installed ${dest}`);
    expect(readFileSync(dest, 'utf8')).toBe(conf);
    expect(statSync(dest).mode & 0o777).toBe(0o644);
    expect(installConf(src, dest)).toBe(`${dest} is up to date`);
    for (const [text, msg] of [
      ['{"name":"cbr0","plugins":[{"type":"flannel"}', /is not JSON/],
      ['[1]', /is not a JSON object/],
      ['{"plugins":[{"type":"flannel"}]}', /field "name" must be a non-empty string/],
      ['{"name":"cbr0","plugins":[]}', /field "plugins" must be a non-empty list/],
      ['{"name":"cbr0","plugins":[{"delegate":{}}]}', /field "plugins\[0\]\.type" must be a string/],
      ['{"name":"cbr0"}', /neither a plugin list \(field "plugins"\) nor a plugin \(field "type"\)/],
    ] as const) {
      writeFileSync(src, text);
      expect(() => installConf(src, dest)).toThrow(msg);
      expect(readFileSync(dest, 'utf8')).toBe(conf);
    }
    expect(readdirSync(join(dir, 'net.d'))).toEqual(['10-flannel.conflist']);
    writeFileSync(src, conf);
    expect(() => installConf(src, join(dir, 'nope', 'x.conflist'))).toThrow(/nope is not a directory/);
  });
});
