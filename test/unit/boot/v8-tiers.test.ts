import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CNI_CALL_V8_FLAGS, RESTORED_V8_FLAGS, restoreTiersUnlessCniCall } from '../../../src/boot/v8-tiers';

describe('V8 tiers of the standalone executable', () => {
  it('turns every tier back on for the daemon and the CLI', () => {
    const set: string[] = [];
    expect(restoreTiersUnlessCniCall({ PATH: '/bin' }, ['daemon', '--etcd-endpoints=x'], (f) => set.push(f))).toBe(true);
    expect(set).toEqual(['--sparkplug', '--maglev', '--turbofan']);
    expect(RESTORED_V8_FLAGS).toHaveLength(CNI_CALL_V8_FLAGS.length);
  });

  it('an operator run with no arguments and no CNI variable is the CLI too', () => {
    const set: string[] = [];
    expect(restoreTiersUnlessCniCall({}, [], (f) => set.push(f))).toBe(true);
    expect(set).toHaveLength(3);
  });

  it('leaves them off for a CNI call', () => {
    const set: string[] = [];
    expect(restoreTiersUnlessCniCall({ CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'c' }, [], (f) => set.push(f))).toBe(false);
    expect(set).toEqual([]);
  });

  it('node accepts the flags at start and the restoring ones at run time', () => {
    const restore = RESTORED_V8_FLAGS.map((f) => `v8.setFlagsFromString(${JSON.stringify(f)});`).join('');
    const r = spawnSync(process.execPath, [...CNI_CALL_V8_FLAGS, '-e', `const v8 = require('node:v8'); ${restore} console.log('ran')`], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH },
    });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('ran');
    expect(r.status).toBe(0);
  });
});
