import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { readConfDir } from '../../../src/libcni/conf-dir';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'conf-dir-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const write = (name: string, value: unknown) =>
  writeFileSync(join(dir, name), typeof value === 'string' ? value : JSON.stringify(value));
const bridge = { type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local', subnet: '10.1.0.0/24' } };

/** The networks as [file name, name, version, plugin types] and the invalid files by name. */
function summary() {
  const { networks, invalid } = readConfDir(dir);
  return {
    networks: networks.map((n) => [basename(n.file), n.name, n.cniVersion, n.plugins.map((p) => p.type)]),
    invalid: invalid.map((i) => [basename(i.file), i.reason]),
  };
}

describe('readConfDir (libcni 1.3 + go-cni)', () => {
  it('reads .conf, .conflist and .json sorted by file name; other files and directories are not configs', () => {
    write('20-list.conflist', { cniVersion: '1.0.0', name: 'list', plugins: [bridge, { type: 'portmap', capabilities: { portMappings: true } }] });
    write('10-single.conf', { cniVersion: '0.4.0', name: 'single', ...bridge });
    write('30-other.json', { name: 'other', type: 'macvlan' });
    write('05-notes.txt', 'not a config');
    write('99-backup.conflist.bak', { name: 'x', plugins: [bridge] });
    mkdirSync(join(dir, '00-dir.conf'));
    expect(summary()).toEqual({
      networks: [
        ['10-single.conf', 'single', '0.4.0', ['bridge']],
        ['20-list.conflist', 'list', '1.0.0', ['bridge', 'portmap']],
        ['30-other.json', 'other', '', ['macvlan']],
      ],
      invalid: [],
    });
  });

  it('keeps each plugin config as written, with nothing injected', () => {
    const portmap = { type: 'portmap', capabilities: { portMappings: true }, snat: false };
    write('a.conflist', { cniVersion: '1.0.0', name: 'n', plugins: [bridge, portmap] });
    expect(readConfDir(dir).networks[0].plugins).toEqual([bridge, portmap]);
  });

  it('reads disableGC and disableCheck as booleans or "true"/"false" strings; a .conf never disables GC', () => {
    write('a.conflist', { name: 'a', disableGC: true, disableCheck: 'TRUE', plugins: [bridge] });
    write('b.conflist', { name: 'b', disableGC: 'false', plugins: [bridge] });
    write('c.conf', { name: 'c', disableGC: true, ...bridge });
    write('d.conflist', { name: 'd', disableGC: 'yes', plugins: [bridge] });
    const { networks, invalid } = readConfDir(dir);
    expect(networks.map((n) => [n.name, n.disableGC, n.disableCheck])).toEqual([
      ['a', true, true],
      ['b', false, false],
      ['c', false, false],
    ]);
    expect(invalid.map((i) => [basename(i.file), i.reason])).toEqual([['d.conflist', 'invalid value "yes" for "disableGC"']]);
  });

  it('takes the highest version of cniVersions (and cniVersion) up to 1.1.0', () => {
    write('a.conflist', { name: 'a', cniVersion: '0.3.1', cniVersions: ['0.4.0', '1.0.0', '9.9.9'], plugins: [bridge] });
    write('b.conflist', { name: 'b', cniVersion: '1.1.0', cniVersions: ['0.4.0'], plugins: [bridge] });
    write('c.conflist', { name: 'c', cniVersions: ['2.0.0'], plugins: [bridge] });
    write('d.conflist', { name: 'd', cniVersions: ['1.0'], plugins: [bridge] });
    expect(summary()).toEqual({
      networks: [
        ['a.conflist', 'a', '1.0.0', ['bridge']],
        ['b.conflist', 'b', '1.1.0', ['bridge']],
        ['c.conflist', 'c', '', ['bridge']],
      ],
      invalid: [['d.conflist', 'invalid cniVersions entry "1.0" at index 0']],
    });
  });

  it('appends <dir>/<name>/*.conf to a list unless loadOnlyInlinedPlugins', () => {
    write('a.conflist', { cniVersion: '1.0.0', name: 'sub', plugins: [bridge] });
    write('b.conflist', { cniVersion: '1.0.0', name: 'subonly' });
    write('c.conflist', { cniVersion: '1.0.0', name: 'sub', loadOnlyInlinedPlugins: true, plugins: [bridge] });
    mkdirSync(join(dir, 'sub'));
    write('sub/20-tuning.conf', { type: 'tuning' });
    write('sub/10-portmap.conf', { type: 'portmap' });
    write('sub/30-ignored.json', { type: 'firewall' });
    mkdirSync(join(dir, 'subonly'));
    write('subonly/1.conf', { type: 'ptp' });
    expect(summary().networks).toEqual([
      ['a.conflist', 'sub', '1.0.0', ['bridge', 'portmap', 'tuning']],
      ['b.conflist', 'subonly', '1.0.0', ['ptp']],
      ['c.conflist', 'sub', '1.0.0', ['bridge']],
    ]);
  });

  it('reports the files a runtime would refuse, with the reason, and reads the rest', () => {
    write('01.conflist', '{ not json');
    write('02.conflist', { plugins: [bridge] });
    write('03.conflist', { name: 7, plugins: [bridge] });
    write('04.conflist', { name: 'n', plugins: [] });
    write('05.conflist', { name: 'n' });
    write('06.conflist', { name: 'n', loadOnlyInlinedPlugins: true });
    write('07.conflist', { name: 'n', plugins: [bridge, { ipam: {} }] });
    write('08.conf', { name: 'n', plugins: [bridge] });
    write('09.conf', '[1]');
    write('10.conflist', { name: 'n', cniVersion: 1, plugins: [bridge] });
    write('11.conflist', { name: 'ok', plugins: [bridge] });
    const { networks, invalid } = readConfDir(dir);
    expect(networks.map((n) => n.name)).toEqual(['ok']);
    expect(invalid.map((i) => [basename(i.file), i.reason])).toEqual([
      ['01.conflist', expect.stringMatching(/JSON/)],
      ['02.conflist', 'no "name"'],
      ['03.conflist', '"name" must be a string'],
      ['04.conflist', 'no plugins in list'],
      ['05.conflist', 'no plugin configs found'],
      ['06.conflist', '"loadOnlyInlinedPlugins" is true and there is no "plugins" list'],
      ['07.conflist', 'plugins[1] has no "type"'],
      ['08.conf', 'the network config has no "type"'],
      ['09.conf', 'expected a JSON object'],
      ['10.conflist', '"cniVersion" must be a string'],
    ]);
  });

  it('finds no networks in a directory that does not exist (as libcni)', () => {
    expect(readConfDir(join(dir, 'missing'))).toEqual({ networks: [], invalid: [] });
  });
});
