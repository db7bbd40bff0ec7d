import { describe, expect, it } from 'vitest';
import { MultiMap } from '../../../src/util/multi-map';

describe('MultiMap', () => {
  it('holds a lone value and several under one key, in the order they came; each value once', () => {
    const m = new MultiMap<string, object>();
    const [a, b, c] = [{ n: 'a' }, { n: 'b' }, { n: 'c' }];
    expect(m.get('k')).toEqual([]);
    m.add('k', a);
    m.add('k', a);
    expect(m.get('k')).toEqual([a]);
    expect(m.get('k')[0]).toBe(a);
    m.add('k', b);
    m.add('k', c);
    m.add('k', b);
    expect(m.get('k')).toEqual([a, b, c]);
    m.add('j', c);
    expect([...m.keys()]).toEqual(['k', 'j']);
    expect([...m.groups()]).toEqual([[a, b, c], [c]]);
  });

  it('takes values out one by one; the key goes with its last; a value not there changes nothing', () => {
    const m = new MultiMap<string, object>();
    const [a, b, c] = [{ n: 'a' }, { n: 'b' }, { n: 'c' }];
    m.add('k', a);
    m.add('k', b);
    m.add('k', c);
    m.delete('k', b);
    expect(m.get('k')).toEqual([a, c]);
    m.delete('k', { n: 'a' }); // equal, not the same
    expect(m.get('k')).toEqual([a, c]);
    m.delete('k', a);
    expect(m.get('k')).toEqual([c]);
    m.delete('k', b);
    m.delete('x', b);
    expect(m.get('k')).toEqual([c]);
    m.delete('k', c);
    expect(m.has('k')).toBe(false);
    expect([...m.keys()]).toEqual([]);
    m.add('k', b); // and back
    expect(m.get('k')).toEqual([b]);
  });

  it('takes arrays and undefined as values like any other', () => {
    const m = new MultiMap<string, unknown>();
    const arr = [1, 2];
    m.add('k', arr);
    expect(m.get('k')).toEqual([arr]);
    m.add('k', undefined);
    expect(m.get('k')).toEqual([arr, undefined]);
    m.delete('k', arr);
    expect(m.get('k')).toEqual([undefined]);
    expect(m.has('k')).toBe(true);
    m.delete('k', undefined);
    expect(m.has('k')).toBe(false);
    m.add('j', arr);
    m.clear();
    expect([...m.keys()]).toEqual([]);
  });
});
