// The Debian package (make deb -> packaging/deb.sh): contents, control file,
// a dpkg install into a throwaway root (never onto this machine) and the
// systemd units through `systemd-analyze verify`.
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, sh, tempDir } from './helpers';

const PLUGINS = ['host-local', 'bridge', 'vxlan-flannel', 'flannel'];
const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
let tmp: ReturnType<typeof tempDir>;
let deb: string;

beforeAll(() => {
  tmp = tempDir('deb');
  deb = join(tmp.path, `cni-ts_${version}_amd64.deb`);
  execFileSync('bash', [join(ROOT, 'packaging/deb.sh'), version, 'amd64', deb], { cwd: ROOT, stdio: 'pipe' });
}, 300_000);
afterAll(() => tmp?.remove());

/** dpkg into a root of its own: its own database, maintainer scripts told DPKG_ROOT (no chroot). */
function dpkg(root: string, ...args: string[]): string {
  return sh(['dpkg', `--root=${root}`, '--force-depends', '--force-script-chrootless', ...args]);
}

describe('make install, install-standalone and uninstall', () => {
  // -o: use the executables this run already built (make test built them).
  const make = (...args: string[]) => sh(['make', '-s', '-C', ROOT, '-o', 'build', '-o', 'standalone', ...args]);

  it('install the four plugins under DESTDIR/CNI_BIN_DIR; uninstall removes them and nothing else', () => {
    const dest = join(tmp.path, 'dest');
    const binDir = join(dest, 'opt/cni/bin');
    mkdirSync(binDir, { recursive: true });
    writeFileSync(join(binDir, 'portmap'), 'another plugin');
    make('install-standalone', `DESTDIR=${dest}`);
    expect(new Set(PLUGINS.map((p) => statSync(join(binDir, p)).ino)).size).toBe(1); // one file, hard-linked
    expect(sh([join(binDir, 'flannel'), '--version']).trim()).toBe(version);
    make('uninstall', `DESTDIR=${dest}`);
    for (const p of PLUGINS) expect(existsSync(join(binDir, p)), p).toBe(false);
    expect(readFileSync(join(binDir, 'portmap'), 'utf8')).toBe('another plugin');

    make('install', `DESTDIR=${dest}`, 'CNI_BIN_DIR=/usr/libexec/cni');
    for (const p of PLUGINS) expect(readFileSync(join(dest, 'usr/libexec/cni', p), 'utf8').split('\n')[0], p).toMatch(/^#!\/usr\/bin\/env -S (-u NODE_\w+ )+node$/);
    make('uninstall', `DESTDIR=${dest}`, 'CNI_BIN_DIR=/usr/libexec/cni');
    for (const p of PLUGINS) expect(existsSync(join(dest, 'usr/libexec/cni', p)), p).toBe(false);
  });
});

describe('the .deb', () => {
  it('carries the third-party notices the build made, naming every npm package the bundles hold, and a copyright file pointing to them', async () => {
    const root = join(tmp.path, 'extract');
    sh(['dpkg-deb', '-x', deb, root]);
    const notices = readFileSync(join(root, 'usr/share/doc/cni-ts/THIRD-PARTY-NOTICES'), 'utf8');
    expect(notices).toBe(readFileSync(join(ROOT, 'dist/THIRD-PARTY-NOTICES'), 'utf8'));
    expect(readFileSync(join(root, 'usr/share/doc/cni-ts/copyright'), 'utf8')).toMatch(/^cni-ts\n\nLicense: Apache-2\.0\n[^]*\/usr\/share\/doc\/cni-ts\/THIRD-PARTY-NOTICES lists each with its license text\.\n$/);
    // the build's own list against an esbuild metafile of the entry points made here
    const { build } = await import('esbuild');
    const dirs = new Set<string>();
    for (const b of ['host-local', 'bridge', 'vxlan-flannel']) {
      for (const entry of [`src/cmd/${b}.ts`, `src/cli/${b}.ts`]) {
        const r = await build({ entryPoints: [join(ROOT, entry)], absWorkingDir: ROOT, bundle: true, platform: 'node', write: false, metafile: true, logLevel: 'silent' });
        for (const i of Object.keys(r.metafile.inputs)) {
          const m = /^(?:.*\/)?node_modules\/(?:@[^/]+\/)?[^/]+(?=\/)/.exec(i);
          if (m) dirs.add(m[0]);
        }
      }
    }
    expect(dirs.size).toBeGreaterThan(10);
    for (const dir of dirs) {
      const pkg = JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8'));
      expect(notices, dir).toContain(`\n${pkg.name} ${pkg.version} (${pkg.license})\n`);
    }
  }, 60_000);

  it('holds the four plugins as one executable, the unit, its defaults and the sample configs', () => {
    const listing = sh(['dpkg-deb', '-c', deb]);
    const entries = listing.split('\n').filter(Boolean).map((l) => l.split(/\s+/).slice(5).join(' '));
    for (const p of PLUGINS) expect(entries.some((e) => e.startsWith(`./opt/cni/bin/${p}`)), p).toBe(true);
    expect(entries.filter((e) => e.includes(' link to ./opt/cni/bin/'))).toHaveLength(3); // stored once
    expect(entries).toContain('./lib/systemd/system/vxlan-flannel.service');
    expect(entries).toContain('./etc/default/vxlan-flannel');
    expect(entries).toContain('./lib/systemd/system/host-local-repair.service');
    expect(entries).toContain('./lib/systemd/system/host-local-repair.timer');
    expect(entries).toContain('./etc/default/host-local-repair');
    for (const f of ['10-bridge.conflist', '10-flannel.conflist', 'flannel-network.json']) {
      expect(entries).toContain(`./usr/share/doc/cni-ts/examples/${f}`);
    }
    // the units' Documentation= and the defaults files point at these
    for (const f of ['README.md', 'host-local.md', 'vxlan-flannel.md', 'bridge.md']) expect(entries).toContain(`./usr/share/doc/cni-ts/${f}`);
    expect(listing.split('\n')[0]).toMatch(/^drwxr-xr-x root\/root .* \.\/$/); // dpkg would make / 0700
  });

  it('installs the file that holds ETCD_PASSWORD readable by root only; the rest as usual', () => {
    const modes = new Map(
      sh(['dpkg-deb', '-c', deb])
        .split('\n')
        .filter(Boolean)
        .map((l) => [l.split(/\s+/)[5], l.split(/\s+/).slice(0, 2).join(' ')]),
    );
    expect(modes.get('./etc/default/vxlan-flannel')).toBe('-rw------- root/root');
    expect(modes.get('./etc/default/host-local-repair')).toBe('-rw-r--r-- root/root');
    expect(modes.get('./lib/systemd/system/vxlan-flannel.service')).toBe('-rw-r--r-- root/root');
    for (const p of PLUGINS) expect(modes.get(`./opt/cni/bin/${p}`), p).toMatch(/^[-h]rwxr-xr-x root\/root$/); // h: a hard link
  });

  it('depends on what the plugins run', () => {
    const depends = sh(['dpkg-deb', '-f', deb, 'Depends']).trim();
    for (const d of ['iproute2', 'util-linux', 'procps', 'iptables | nftables']) expect(depends).toContain(d);
    expect(sh(['dpkg-deb', '-f', deb, 'Package', 'Version', 'Architecture'])).toBe(`Package: cni-ts\nVersion: ${version}\nArchitecture: amd64\n`);
    expect(sh(['dpkg-deb', '-I', deb, 'conffiles']).trim()).toBe('/etc/default/vxlan-flannel\n/etc/default/host-local-repair');
  });

  it('installs into a throwaway root, runs from there, and purges cleanly', () => {
    const root = join(tmp.path, 'root');
    mkdirSync(join(root, 'var/lib/dpkg/updates'), { recursive: true });
    mkdirSync(join(root, 'var/lib/dpkg/info'));
    writeFileSync(join(root, 'var/lib/dpkg/status'), '');
    dpkg(root, '-i', deb);
    const bin = join(root, 'opt/cni/bin');
    const inodes = new Set(PLUGINS.map((p) => statSync(join(bin, p)).ino));
    expect(inodes.size).toBe(1);
    expect(statSync(join(bin, 'bridge')).mode & 0o777).toBe(0o755);
    for (const p of PLUGINS) expect(sh([join(bin, p), '--version']).trim(), p).toBe(version);
    expect(sh(['dpkg', `--root=${root}`, '-s', 'cni-ts'])).toContain('Status: install ok installed');
    expect(statSync(join(root, 'etc/default/vxlan-flannel')).mode & 0o777).toBe(0o600);
    // an edited copy from a release that installed it 0644 is made 0600 by the next configure
    chmodSync(join(root, 'etc/default/vxlan-flannel'), 0o644);
    writeFileSync(join(root, 'etc/default/vxlan-flannel'), 'ETCD_PASSWORD=secret\n', { flag: 'a' });
    dpkg(root, '-i', deb);
    expect(statSync(join(root, 'etc/default/vxlan-flannel')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(root, 'etc/default/vxlan-flannel'), 'utf8')).toMatch(/ETCD_PASSWORD=secret\n$/);

    mkdirSync(join(root, 'var/cache/cni-ts'), { recursive: true, mode: 0o700 }); // as a plugin call leaves it
    dpkg(root, '--purge', 'cni-ts');
    for (const p of PLUGINS) expect(existsSync(join(bin, p)), p).toBe(false);
    expect(existsSync(join(root, 'etc/default/vxlan-flannel'))).toBe(false);
    expect(existsSync(join(root, 'lib/systemd/system/vxlan-flannel.service'))).toBe(false);
    expect(existsSync(join(root, 'etc/default/host-local-repair'))).toBe(false);
    expect(existsSync(join(root, 'lib/systemd/system/host-local-repair.timer'))).toBe(false);
    expect(existsSync(join(root, 'var/cache/cni-ts'))).toBe(false);
  });

  /** systemd-analyze verify of units extracted to `root`, with the package's /opt mounted over /opt in a private mount namespace (verify checks that ExecStart exists). */
  function verify(root: string, ...units: string[]): string {
    expect(existsSync('/opt'), '/opt must exist to mount the package over it').toBe(true);
    return execFileSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount --bind "$1/opt" /opt && shift && systemd-analyze verify "$@" 2>&1', 'sh', root, ...units], {
      encoding: 'utf8',
    });
  }

  it('has a unit systemd-analyze verify accepts, with its flags from /etc/default and restarts on failure', () => {
    const root = join(tmp.path, 'extract');
    sh(['dpkg-deb', '-x', deb, root]);
    const unit = join(root, 'lib/systemd/system/vxlan-flannel.service');
    const text = readFileSync(unit, 'utf8');
    expect(text).toMatch(/^After=network-online\.target$/m);
    expect(text).toMatch(/^Wants=network-online\.target$/m);
    expect(text).toMatch(/^EnvironmentFile=-\/etc\/default\/vxlan-flannel$/m);
    expect(text).toMatch(/^ExecStart=\/opt\/cni\/bin\/vxlan-flannel daemon \$VXLAN_FLANNEL_OPTS$/m);
    expect(text).toMatch(/^Restart=on-failure$/m);
    expect(readFileSync(join(root, 'etc/default/vxlan-flannel'), 'utf8')).toMatch(/^VXLAN_FLANNEL_OPTS=""$/m);
    expect(verify(root, unit)).toBe('');
  });

  it('has a repair timer (hourly, not enabled by the package) and its oneshot service, which verify accepts, flags from /etc/default', () => {
    const root = join(tmp.path, 'extract-repair');
    sh(['dpkg-deb', '-x', deb, root]);
    const units = join(root, 'lib/systemd/system');
    const service = readFileSync(join(units, 'host-local-repair.service'), 'utf8');
    expect(service).toMatch(/^Type=oneshot$/m);
    expect(service).toMatch(/^EnvironmentFile=-\/etc\/default\/host-local-repair$/m);
    expect(service).toMatch(/^ExecStart=\/opt\/cni\/bin\/host-local repair \$HOST_LOCAL_REPAIR_OPTS$/m);
    expect(service).not.toMatch(/^\[Install\]/m); // started by the timer only
    const timer = readFileSync(join(units, 'host-local-repair.timer'), 'utf8');
    expect(timer).toMatch(/^OnUnitActiveSec=1h$/m);
    expect(timer).toMatch(/^WantedBy=timers\.target$/m);
    // nothing in the package enables it
    for (const script of ['postinst', 'prerm', 'postrm']) expect(sh(['dpkg-deb', '-I', deb, script])).not.toMatch(/systemctl (enable|start)/);
    expect(readFileSync(join(root, 'etc/default/host-local-repair'), 'utf8')).toMatch(/^HOST_LOCAL_REPAIR_OPTS="--runtime-endpoint unix:\/\/\/run\/containerd\/containerd\.sock"$/m);
    expect(verify(root, join(units, 'host-local-repair.timer'), join(units, 'host-local-repair.service'))).toBe('');
  });
});
