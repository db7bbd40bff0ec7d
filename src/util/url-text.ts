// A URL as it may be printed: never with its user info. A password in an API
// server's or etcd's URL would otherwise reach every log line and error
// message that names the URL.

/** `text` with the user info of every URL in it removed ("https://:pw@host/" → "https://host/"). */
export function withoutUserInfo(text: string): string {
  return text.replace(/([a-zA-Z][a-zA-Z0-9+.-]*:\/\/)[^/?#\s@]*@/g, '$1');
}

/** Whether `text` (one URL) carries user info: a name, a password, or an empty one ("https://@host"). */
export const hasUserInfo = (text: string) => /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#\s]*@/.test(text);
