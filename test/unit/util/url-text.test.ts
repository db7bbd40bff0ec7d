import { describe, expect, it } from 'vitest';
import { hasUserInfo, withoutUserInfo } from '../../../src/util/url-text';

describe('URLs in text', () => {
  it('lose their user info, wherever they are in the text', () => {
    expect(withoutUserInfo('GET https://:hunter2@10.0.0.1:6443/api/v1/nodes: 401')).toBe('GET https://10.0.0.1:6443/api/v1/nodes: 401');
    expect(withoutUserInfo('etcd http://u:p@a:2379,https://b@c:2379 unreachable')).toBe('etcd http://a:2379,https://c:2379 unreachable');
    expect(withoutUserInfo('https://host/path?x=a@b')).toBe('https://host/path?x=a@b'); // an @ after the authority is not user info
  });
  it('tell a URL with user info, empty or not', () => {
    for (const u of ['https://a@h', 'https://:p@h/', 'http://a:b@h:1', 'https://@h']) expect(hasUserInfo(u), u).toBe(true);
    for (const u of ['https://h', 'https://h/a@b', 'h:6443']) expect(hasUserInfo(u), u).toBe(false);
  });
});
