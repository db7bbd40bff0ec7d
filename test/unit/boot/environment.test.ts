import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ignoreNodeEnvironment, STARTUP_NODE_VARIABLES } from '../../../src/boot/environment';

describe('ignoreNodeEnvironment', () => {
  it('removes every NODE_* variable and nothing else', () => {
    const env: NodeJS.ProcessEnv = { NODE_TLS_REJECT_UNAUTHORIZED: '0', NODE_REDIRECT_WARNINGS: '/tmp/w', NODE_DEBUG: 'net', PATH: '/bin', CNI_COMMAND: 'ADD', NODENAME: 'x' };
    ignoreNodeEnvironment(false, env);
    expect(env).toEqual({ PATH: '/bin', CNI_COMMAND: 'ADD', NODENAME: 'x' });
  });

  it('the scripts\' shebang unsets every variable Node reads at start, NODE_OPTIONS first, within the kernel\'s 256 bytes', () => {
    const script = join(__dirname, '../../../bin/host-local');
    const line = readFileSync(script, 'utf8').split('\n')[0];
    expect(line).toBe(`#!/usr/bin/env -S ${STARTUP_NODE_VARIABLES.map((n) => `-u ${n} `).join('')}node`);
    expect(STARTUP_NODE_VARIABLES[0]).toBe('NODE_OPTIONS');
    expect(line.length).toBeLessThan(256);
  });
});
