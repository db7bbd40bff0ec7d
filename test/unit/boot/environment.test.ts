import { describe, expect, it } from 'vitest';
import { ignoreNodeEnvironment } from '../../../src/boot/environment';

describe('ignoreNodeEnvironment', () => {
  it("removes every NODE_* variable but flanneld's NODE_NAME, and nothing else", () => {
    const env: NodeJS.ProcessEnv = { NODE_TLS_REJECT_UNAUTHORIZED: '0', NODE_REDIRECT_WARNINGS: '/tmp/w', NODE_DEBUG: 'net', PATH: '/bin', CNI_COMMAND: 'ADD', NODENAME: 'x', NODE_NAME: 'n1' };
    ignoreNodeEnvironment(false, env);
    expect(env).toEqual({ PATH: '/bin', CNI_COMMAND: 'ADD', NODENAME: 'x', NODE_NAME: 'n1' });
  });
});
