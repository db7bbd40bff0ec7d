// Plugin call or operator command line: src/cni/env.ts isCniInvocation.
import { describe, expect, it } from 'vitest';
import { isCniInvocation } from '../../../src/cni/env';

describe('isCniInvocation', () => {
  it('a runtime call: no arguments and CNI_COMMAND', () => {
    expect(isCniInvocation({ CNI_COMMAND: 'ADD' }, [])).toBe(true);
    expect(isCniInvocation({ CNI_COMMAND: '' }, [])).toBe(true);
  });

  it('a runtime that forgot CNI_COMMAND still gets a CNI error: no arguments and any spec variable', () => {
    for (const name of ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_ARGS', 'CNI_PATH']) {
      expect(isCniInvocation({ [name]: 'x' }, []), name).toBe(true);
    }
  });

  it("the project's own variables do not make a plugin call", () => {
    expect(isCniInvocation({ CNI_TS_CODE_CACHE_DIR: '/tmp/cc', CNI_TS_TRACE: '1', PATH: '/bin' }, [])).toBe(false);
  });

  it('a subcommand or option is always the CLI, whatever the environment holds', () => {
    expect(isCniInvocation({ CNI_PATH: '/opt/cni/bin' }, ['daemon'])).toBe(false);
    expect(isCniInvocation({ CNI_COMMAND: 'ADD', CNI_PATH: '/opt/cni/bin' }, ['ls'])).toBe(false);
    expect(isCniInvocation({ CNI_COMMAND: 'ADD' }, ['--help'])).toBe(false);
  });

  it('nothing at all is the CLI (its help)', () => {
    expect(isCniInvocation({}, [])).toBe(false);
  });
});
