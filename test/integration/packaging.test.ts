// The Debian package (make deb -> packaging/deb.sh): contents, control file,
// a dpkg install into a throwaway root (never onto this machine) and the
// systemd units through `systemd-analyze verify`; and arm64's (make deb
// ARCH=arm64): the same files, arm64's executable.
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, sh, tempDir } from './helpers';
import { ELF_MACHINE, elfMachines, foreignElf } from './artifacts';

const PLUGINS = ['host-local', 'bridge', 'vxlan-flannel', 'flannel'];
const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
let tmp: ReturnType<typeof tempDir>;
let deb: string;

beforeAll(() => {
  tmp = tempDir('deb');
  deb = join(tmp.path, `cni-ts_${version}_amd64.deb`);
  buildDeb('amd64', deb);
}, 300_000);
afterAll(() => tmp?.remove());

/** dpkg into a root of its own: its own database, maintainer scripts told DPKG_ROOT (no chroot). */
function dpkg(root: string, ...args: string[]): string {
  return sh(['dpkg', `--root=${root}`, '--force-depends', '--force-script-chrootless', ...args]);
}

/** Builds the package of `arch` from `binDir` (packaging/deb.sh's default: where make puts that arch's executables). */
function buildDeb(arch: string, out: string, binDir?: string): void {
  execFileSync('bash', [join(ROOT, 'packaging/deb.sh'), version, arch, out, ...(binDir ? [binDir] : [])], { cwd: ROOT, stdio: 'pipe' });
}

/** The package's files as `dpkg-deb -c` lists them, without sizes and dates: mode, owner, path (and link target). */
function contents(file: string): string[] {
  return sh(['dpkg-deb', '-c', file])
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const f = l.split(/\s+/);
      return [f[0], f[1], ...f.slice(5)].join(' ');
    });
}

/** Extracts the package into `root`: its ELF files are the four plugins, all for `machine`. */
function expectOnlyElf(file: string, root: string, machine: string): void {
  sh(['dpkg-deb', '-x', file, root]);
  const machines = elfMachines(root);
  expect([...machines.keys()].sort()).toEqual(PLUGINS.map((p) => `opt/cni/bin/${p}`).sort());
  expect(foreignElf(machines, machine)).toEqual([]);
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

  it('holds x86-64 executables and libraries only (readelf -h of every ELF file in it)', () => {
    expectOnlyElf(deb, join(tmp.path, 'extract-elf'), ELF_MACHINE.amd64);
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

describe('the arm64 .deb (make deb ARCH=arm64)', () => {
  let arm64Deb: string;
  beforeAll(() => {
    arm64Deb = join(tmp.path, `cni-ts_${version}_arm64.deb`);
    const t0 = Date.now();
    buildDeb('arm64', arm64Deb);
    const sizes = `${statSync(arm64Deb).size} bytes (amd64's: ${statSync(deb).size})`;
    process.stdout.write(`[deb] packaging/deb.sh arm64: ${Date.now() - t0} ms, ${sizes}\n`);
  }, 300_000);

  it('holds the same files as amd64\'s, with the same modes and links; its control file differs in the architecture and size only', () => {
    expect(contents(arm64Deb)).toEqual(contents(deb));
    const control = (file: string) => sh(['dpkg-deb', '-f', file]).replace(/^(Architecture|Installed-Size): .*\n/gm, '');
    expect(control(arm64Deb)).toBe(control(deb));
    expect(sh(['dpkg-deb', '-f', arm64Deb, 'Architecture'])).toBe('arm64\n');
  });

  it('holds AArch64 executables and libraries only, which run (here through qemu-user)', () => {
    const root = join(tmp.path, 'extract-arm64');
    expectOnlyElf(arm64Deb, root, ELF_MACHINE.arm64);
    expect(sh([join(root, 'opt/cni/bin/flannel'), '--version']).trim()).toBe(version);
  });

  it('is never made from another architecture\'s executables: deb.sh refuses, and writes nothing', () => {
    const out = join(tmp.path, 'wrong.deb');
    let err: { status?: number; stderr?: Buffer } = {};
    try {
      buildDeb('arm64', out, 'dist/bin');
    } catch (e) {
      err = e as typeof err;
    }
    expect(err.status).toBe(1);
    expect(err.stderr?.toString()).toContain('deb: dist/bin/host-local is Advanced Micro Devices X86-64, not arm64\'s AArch64');
    expect(existsSync(out)).toBe(false);
  });
});
