import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { delegate } from '../../../src/cni/delegate';
import { CniError } from '../../../src/cni/errors';
import { rejected } from '../../support/expect';

const dir = fs.mkdtempSync(join(tmpdir(), 'delegate-'));
/** A fake plugin: records its env and stdin, then prints what the test asked for. */
function fakePlugin(name: string, body: string): void {
  const file = join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\nenv > "${dir}/${name}.env"\ncat > "${dir}/${name}.stdin"\n${body}\n`);
  fs.chmodSync(file, 0o755);
}

beforeAll(() => {
  fakePlugin('good', `echo '{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.9.0.2/24"}]}'`);
  fakePlugin('fails', `echo '{"cniVersion":"1.0.0","code":11,"msg":"busy","details":"try later"}'; exit 1`);
  fakePlugin('crashes', `echo 'panic: oops' >&2; exit 2`);
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const conf = { cniVersion: '1.0.0', name: 'n', type: 'good' };

describe('delegate', () => {
  it('runs the plugin from CNI_PATH with our env, its command and the config on stdin', async () => {
    const result = await delegate({ command: 'ADD', type: 'good', conf, path: ['/nonexistent', dir], env: { CNI_CONTAINERID: 'c', PATH: '/usr/bin:/bin' } });
    expect(result).toEqual({ ips: [{ address: '10.9.0.2/24' }] });
    expect(fs.readFileSync(join(dir, 'good.env'), 'utf8')).toMatch(/^CNI_COMMAND=ADD$/m);
    expect(fs.readFileSync(join(dir, 'good.env'), 'utf8')).toMatch(/^CNI_CONTAINERID=c$/m);
    expect(JSON.parse(fs.readFileSync(join(dir, 'good.stdin'), 'utf8'))).toEqual(conf);
  });

  it("keeps a delegate's error code and message, naming the plugin", async () => {
    const err = await rejected(CniError, delegate({ command: 'DEL', type: 'fails', conf, path: [dir] }));
    expect([err.code, err.message, err.details]).toEqual([11, 'fails: busy', 'try later']);
  });

  it('turns a crash without an error object into code 999 with what it said', async () => {
    // The delegate's stderr is passed on to ours (captured here: the crash is provoked on purpose).
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      const err = await rejected(CniError, delegate({ command: 'ADD', type: 'crashes', conf, path: [dir] }));
      expect(err.code).toBe(999);
      expect(err.details).toMatch(/panic: oops/);
      expect(stderr.mock.calls.map((c) => String(c[0])).join('')).toBe('panic: oops\n');
    } finally {
      stderr.mockRestore();
    }
  });

  it.each([
    ['missing', [dir], 7, /plugin "missing" \(field "ipam.type"\) not found in CNI_PATH/],
    ['../etc/passwd', [dir], 7, /field "ipam.type" "..\/etc\/passwd" is not a valid plugin name/],
    ['good', [], 4, /CNI_PATH is not set/],
  ])('%s with CNI_PATH %j → code %i', async (type, path, code, message) => {
    const err = await rejected(CniError, delegate({ command: 'ADD', type, field: 'ipam.type', conf, path }));
    expect(err.code).toBe(code);
    expect(err.message).toMatch(message);
  });
});
