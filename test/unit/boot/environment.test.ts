import { describe, expect, it } from 'vitest';
import { RESTARTED_VARIABLE, ignoreNodeEnvironment } from '../../../src/boot/environment';

describe('ignoreNodeEnvironment', () => {
  it("removes every NODE_* variable but flanneld's NODE_NAME, and nothing else", () => {
    const env: NodeJS.ProcessEnv = { NODE_TLS_REJECT_UNAUTHORIZED: '0', NODE_REDIRECT_WARNINGS: '/tmp/w', NODE_DEBUG: 'net', PATH: '/bin', CNI_COMMAND: 'ADD', NODENAME: 'x', NODE_NAME: 'n1' };
    ignoreNodeEnvironment(false, env);
    expect(env).toEqual({ PATH: '/bin', CNI_COMMAND: 'ADD', NODENAME: 'x', NODE_NAME: 'n1' });
  });

  it('sets the variables a start must have (GLIBC_TUNABLES), replacing a different value', () => {
    const env: NodeJS.ProcessEnv = { PATH: '/bin', GLIBC_TUNABLES: 'glibc.malloc.check=3', NODE_DEBUG: 'net' };
    ignoreNodeEnvironment(false, env, { GLIBC_TUNABLES: 'glibc.malloc.check=3:glibc.malloc.arena_max=2' });
    expect(env).toEqual({ PATH: '/bin', GLIBC_TUNABLES: 'glibc.malloc.check=3:glibc.malloc.arena_max=2' });
  });

  it('a start restarted for them does not set them again, whatever it finds (no restart loop), and drops the marker', () => {
    const env: NodeJS.ProcessEnv = { PATH: '/bin', [RESTARTED_VARIABLE]: '1' }; // as after glibc dropped GLIBC_TUNABLES
    ignoreNodeEnvironment(false, env, { GLIBC_TUNABLES: 'glibc.malloc.arena_max=2' });
    expect(env).toEqual({ PATH: '/bin' });
  });
});
