// The build id: what build.mjs stamps (build-stamp.mjs) is what a plugin reads (src/cni/build-stamp.ts).
import { afterAll, describe, expect, it } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readBuildStamp } from '../../../src/cni/build-stamp';
// @ts-expect-error build-stamp.mjs is plain JavaScript, run by build.mjs
import { buildId, scriptStamp, stampStandalone } from '../../../build-stamp.mjs';

const dir = fs.mkdtempSync(join(tmpdir(), 'build-stamp-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
const write = (name: string, data: string | Buffer) => {
  const file = join(dir, name);
  fs.writeFileSync(file, data);
  return file;
};
const ID = buildId('"1.0.0"', { bridge: 'b', 'host-local': 'h' }) as string;

describe('build id', () => {
  it('is one id per build: the same bundles give the same id, any change another', () => {
    expect(ID).toMatch(/^[0-9a-f]{32}$/);
    expect(buildId('"1.0.0"', { 'host-local': 'h', bridge: 'b' })).toBe(ID);
    expect(buildId('"1.0.0"', { bridge: 'b', 'host-local': 'h2' })).not.toBe(ID);
    expect(buildId('"1.0.1"', { bridge: 'b', 'host-local': 'h' })).not.toBe(ID);
  });

  it("reads a script's id and bundle from its second line", () => {
    const file = write('script', `#!/usr/bin/env node\n${scriptStamp(ID, 'bridge')}"use strict";var a=1;\n`);
    expect(readBuildStamp(file)).toEqual({ id: ID, bundle: 'bridge' });
  });

  it('after the longest first line a kernel runs (255 bytes: our scripts unset NODE_* variables there)', () => {
    const line = `#!/usr/bin/env -S ${'-u NODE_X '.repeat(21)}node`.padEnd(255, ' ');
    expect(line.length).toBe(255);
    expect(readBuildStamp(write('long', `${line}\n${scriptStamp(ID, 'host-local')}"use strict";\n`))).toEqual({ id: ID, bundle: 'host-local' });
  });

  it("reads a standalone executable's id from the trailer after its ELF image", () => {
    const file = write('elf', Buffer.concat([Buffer.from('\x7fELF', 'latin1'), Buffer.alloc(100_000, 7)]));
    expect(readBuildStamp(file)).toBeUndefined();
    stampStandalone(file, ID);
    expect(readBuildStamp(file)).toEqual({ id: ID });
  });

  it('finds no stamp where there is none, or where it is not in its place', () => {
    expect(readBuildStamp(join(dir, 'missing'))).toBeUndefined();
    expect(readBuildStamp(write('plain', '#!/bin/sh\necho hi\n'))).toBeUndefined();
    expect(readBuildStamp(write('line3', `#!/bin/sh\n\n${scriptStamp(ID, 'bridge')}`))).toBeUndefined();
    expect(readBuildStamp(write('noelf', `MZ...\ncni-ts-build:${ID}\n`))).toBeUndefined();
    expect(readBuildStamp(write('short', `\x7fELF\ncni-ts-build:${ID.slice(1)}\n`))).toBeUndefined();
    expect(readBuildStamp(write('empty', ''))).toBeUndefined();
  });
});
