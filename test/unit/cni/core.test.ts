import { describe, expect, it, vi } from 'vitest';
import { checkKnownArgs, parseCniArgs } from '../../../src/cni/args';
import { readInvocation } from '../../../src/cni/env';
import { CniError } from '../../../src/cni/errors';
import { handle, PluginHandlers } from '../../../src/cni/skel';

function codeOf(fn: () => unknown): number {
  try {
    fn();
  } catch (err) {
    if (err instanceof CniError) return err.code;
    throw err;
  }
  return 0;
}

describe('CNI_ARGS', () => {
  it('parses K=V pairs, values may contain =', () => {
    expect([...parseCniArgs('IP=10.0.0.1;K8S_POD_NAME=a=b;;')]).toEqual([
      ['IP', '10.0.0.1'],
      ['K8S_POD_NAME', 'a=b'],
    ]);
  });
  it('rejects a pair without =', () => expect(codeOf(() => parseCniArgs('IP'))).toBe(4));
  it('rejects unknown keys unless IgnoreUnknown', () => {
    expect(codeOf(() => checkKnownArgs(parseCniArgs('FOO=1'), ['IP']))).toBe(4);
    expect(codeOf(() => checkKnownArgs(parseCniArgs('FOO=1;IgnoreUnknown=1'), ['IP']))).toBe(0);
    expect(codeOf(() => checkKnownArgs(parseCniArgs('FOO=1;IgnoreUnknown=true'), ['IP']))).toBe(0);
    expect(codeOf(() => checkKnownArgs(parseCniArgs('FOO=1;IgnoreUnknown=0'), ['IP']))).toBe(4);
    expect(codeOf(() => checkKnownArgs(parseCniArgs('IgnoreUnknown=maybe'), ['IP']))).toBe(4);
  });
});

describe('environment', () => {
  const base = { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'abc', CNI_NETNS: '/var/run/netns/x', CNI_IFNAME: 'eth0' };
  it('accepts a complete ADD', () => expect(readInvocation(base).command).toBe('ADD'));
  it.each([
    [{ ...base, CNI_COMMAND: 'FROB' }, /CNI_COMMAND "FROB" is unknown/],
    [{ ...base, CNI_COMMAND: undefined }, /CNI_COMMAND is not set/],
    [{ ...base, CNI_NETNS: undefined, CNI_IFNAME: '' }, /missing for ADD: CNI_NETNS, CNI_IFNAME/],
    [{ ...base, CNI_COMMAND: 'DEL', CNI_CONTAINERID: '' }, /missing for DEL: CNI_CONTAINERID/],
    [{ ...base, CNI_CONTAINERID: '-abc' }, /CNI_CONTAINERID "-abc" is invalid/],
    [{ ...base, CNI_CONTAINERID: 'a/b' }, /CNI_CONTAINERID/],
    [{ ...base, CNI_IFNAME: 'a-very-long-name0' }, /longer than 15 bytes/],
    [{ ...base, CNI_IFNAME: '..' }, /'.' or '..'/],
    [{ ...base, CNI_IFNAME: 'eth:0' }, /contains '\/', ':' or whitespace/],
    [{ ...base, CNI_IFNAME: 'eth 0' }, /whitespace/],
    [{ ...base, CNI_IFNAME: 'eth0\u0001' }, /^CNI_IFNAME "eth0\\u0001" is invalid: it contains a control character$/],
    [{ ...base, CNI_IFNAME: 'eth\u007f' }, /^CNI_IFNAME .* control character$/],
    [{ ...base, CNI_NETNS: '/var/run/netns/x\u001bq' }, /^CNI_NETNS "\/var\/run\/netns\/x\\u001bq" is invalid: it contains a control character$/],
  ])('rejects %j with code 4', (env, message) => {
    expect(() => readInvocation(env)).toThrow(message);
    expect(codeOf(() => readInvocation(env))).toBe(4);
  });
  it('DEL without CNI_NETNS, GC and STATUS without any of them', () => {
    expect(readInvocation({ ...base, CNI_COMMAND: 'DEL', CNI_NETNS: undefined }).netns).toBe('');
    expect(readInvocation({ CNI_COMMAND: 'GC' }).command).toBe('GC');
    expect(readInvocation({ CNI_COMMAND: 'STATUS' }).command).toBe('STATUS');
  });
});

describe('dispatch (skel.handle)', () => {
  const calls: string[] = [];
  const plugin: PluginHandlers = {
    name: 'fake',
    knownArgs: [],
    add: async () => (calls.push('add'), { ips: [{ address: '10.0.0.2/24' }] }),
    del: async () => void calls.push('del'),
    check: async () => void calls.push('check'),
    gc: async () => void calls.push('gc'),
    status: async () => {
      throw new CniError(50, 'not ready');
    },
  };
  const env = { CNI_CONTAINERID: 'c', CNI_NETNS: '/n', CNI_IFNAME: 'eth0' };
  const run = (command: string, stdin: string) => handle(plugin, { ...env, CNI_COMMAND: command }, () => stdin);
  const conf = (v: string) => JSON.stringify({ cniVersion: v, name: 'net', type: 'fake' });

  it('prints the result in the config version', async () => {
    const out = await run('ADD', conf('0.4.0'));
    expect(out.exitCode).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({ cniVersion: '0.4.0', ips: [{ version: '4', address: '10.0.0.2/24' }] });
  });

  it('VERSION answers even without a usable config on stdin', async () => {
    for (const stdin of ['', 'garbage', '{"cniVersion":"9.9.9"}']) {
      const out = await run('VERSION', stdin);
      expect(out.exitCode).toBe(0);
      expect(JSON.parse(out.stdout).cniVersion).toBe('1.1.0');
    }
  });

  it('VERSION lists every supported version', async () => {
    const out = await run('VERSION', '{"cniVersion":"0.3.1"}');
    expect(JSON.parse(out.stdout)).toEqual({ cniVersion: '0.3.1', supportedVersions: ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] });
  });

  it.each([
    ['ADD', '{not json', 6],
    ['ADD', '[]', 6],
    ['ADD', JSON.stringify({ cniVersion: '9.9.9', name: 'net' }), 1],
    ['ADD', JSON.stringify({ cniVersion: '1.0.0' }), 7],
    ['ADD', JSON.stringify({ cniVersion: '1.0.0', name: 'bad name' }), 7],
    ['CHECK', conf('0.3.1'), 1],
    ['GC', conf('1.0.0'), 1],
    ['STATUS', conf('1.0.0'), 1],
    ['STATUS', conf('1.1.0'), 50],
  ])('%s with %s → code %i, error object, exit 1', async (command, stdin, code) => {
    const out = await run(command, stdin);
    expect(out.exitCode).toBe(1);
    const err = JSON.parse(out.stdout);
    expect(err.code).toBe(code);
    expect(typeof err.msg).toBe('string');
    expect(JSON.stringify(err)).not.toMatch(/\\n\s+at /); // no stack trace on stdout
  });

  it('unexpected errors become code 999 with the cause in details', async () => {
    const broken = { ...plugin, del: async () => { throw new TypeError('boom'); } };
    // The stack goes to stderr (captured here: this error is provoked on purpose), never to stdout.
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      const out = await handle(broken, { ...env, CNI_COMMAND: 'DEL' }, () => conf('1.0.0'));
      const err = JSON.parse(out.stdout);
      expect(err).toEqual({ cniVersion: '1.0.0', code: 999, msg: 'boom', details: 'TypeError: boom' });
      expect(stderr.mock.calls.map((c) => String(c[0])).join('')).toMatch(/^fake: boom \(TypeError: boom\)\nTypeError: boom\n\s+at /);
    } finally {
      stderr.mockRestore();
    }
  });
});
