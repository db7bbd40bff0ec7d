// The init containers' subcommands (src/flannel/commands/install.ts) on a
// temp directory: atomic replacement (a reader holding the old file keeps
// it), same bytes left alone, bad input refused with nothing changed.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { installConf, installPlugin } from '../../../../src/flannel/commands/install';

/** An executable of ours as far as install-plugin can tell: a script with a build stamp (build-stamp.mjs's form). */
const stamped = (body: string) => `#!/usr/bin/env node\n//cni-ts-build:${'ab'.repeat(16)}:vxlan-flannel\n${body}`;

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
    const NEW = stamped('NEW'.repeat(400_000)); // more than one compare chunk
    writeFileSync(exe, NEW);
    chmodSync(exe, 0o755);
    writeFileSync(join(dir, 'bin', 'flannel'), 'OLD flannel');
    const running = openSync(join(dir, 'bin', 'flannel'), 'r'); // "a kubelet runs the old one"
    expect(installPlugin(exe, join(dir, 'bin'), ['flannel', 'bridge'])).toEqual([`installed ${dir}/bin/flannel`, `installed ${dir}/bin/bridge`]);
    const buf = Buffer.alloc(11);
    readSync(running, buf, 0, 11, 0);
    closeSync(running);
    expect(buf.toString()).toBe('OLD flannel');
    for (const n of ['flannel', 'bridge']) {
      expect(readFileSync(join(dir, 'bin', n), 'utf8')).toBe(NEW);
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
    writeFileSync(exe, stamped('x'), { mode: 0o755 });
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

  it('install-plugin copies only an executable of ours, never more readable or executable than its source', () => {
    const secret = join(dir, 'shadow');
    writeFileSync(secret, 'root:$y$j9T$secret:19000:0:99999:7:::\n', { mode: 0o640 });
    expect(() => installPlugin(secret, join(dir, 'bin'), ['flannel'])).toThrow(`${secret} is not an executable of cni-ts (it has no build stamp): only the plugins are installed`);
    const notExecutable = join(dir, 'vxlan-flannel');
    writeFileSync(notExecutable, stamped('x'), { mode: 0o644 });
    expect(() => installPlugin(notExecutable, join(dir, 'bin'), ['flannel'])).toThrow(/is not executable \(mode 644\)/);
    expect(readdirSync(join(dir, 'bin'))).toEqual([]);
    chmodSync(notExecutable, 0o700);
    installPlugin(notExecutable, join(dir, 'bin'), ['flannel']);
    expect(statSync(join(dir, 'bin', 'flannel')).mode & 0o777).toBe(0o700);
  });

  it('a file or symlink planted at a temp name is never written through: the next name is taken, the link\'s target untouched', () => {
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'VICTIM', { mode: 0o600 });
    const exe = join(dir, 'vxlan-flannel');
    writeFileSync(exe, stamped('NEW'), { mode: 0o755 });
    const src = join(dir, 'cni-conf.json');
    writeFileSync(src, '{"name":"cbr0","type":"flannel"}');
    // the first random name is known in advance (as the old ".<name>.<pid>.tmp" always was): a link waits there
    const first = 0.123456789;
    const planted = (target: string) => join(dirname(target), `.${basename(target)}.${process.pid}.${first.toString(36).slice(2, 10)}.tmp`);
    for (const target of [join(dir, 'bin', 'flannel'), join(dir, 'net.d', '10-flannel.conflist')]) symlinkSync(victim, planted(target));
    const random = vi.spyOn(Math, 'random').mockReturnValueOnce(first).mockReturnValueOnce(0.5).mockReturnValueOnce(first).mockReturnValueOnce(0.5);
    try {
      installPlugin(exe, join(dir, 'bin'), ['flannel']);
      installConf(src, join(dir, 'net.d', '10-flannel.conflist'));
    } finally {
      random.mockRestore();
    }
    expect(readFileSync(victim, 'utf8')).toBe('VICTIM');
    expect(statSync(victim).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, 'bin', 'flannel'), 'utf8')).toBe(stamped('NEW'));
    expect(lstatSync(join(dir, 'net.d', '10-flannel.conflist')).isFile()).toBe(true);
    expect(statSync(join(dir, 'net.d', '10-flannel.conflist')).mode & 0o777).toBe(0o644);
  });

  it('install-conf makes the config no more readable than its source, and quotes nothing of a file that is not JSON', () => {
    const src = join(dir, 'cni-conf.json');
    writeFileSync(src, '{"name":"cbr0","type":"flannel"}', { mode: 0o600 });
    installConf(src, join(dir, 'net.d', '10-flannel.conflist'));
    expect(statSync(join(dir, 'net.d', '10-flannel.conflist')).mode & 0o777).toBe(0o600);
    writeFileSync(src, 'root:$y$j9T$secret:19000:0:99999:7:::\n');
    expect(() => installConf(src, join(dir, 'net.d', '20.conflist'))).toThrow(new Error(`${src} is not JSON`));
  });
});
