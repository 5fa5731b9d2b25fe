// What pages need from the app shell: their context, navigation, errors.
import { h } from './dom';

export interface Ctx {
  root: HTMLElement;
  params: string[];
  query: URLSearchParams;
  signal: AbortSignal;
  onCleanup: (fn: () => void) => void;
}

let impl: (href: string, replace: boolean) => void = (href) => {
  location.href = href;
};

export function setNavigate(f: (href: string, replace: boolean) => void): void {
  impl = f;
}

export function navigate(href: string, replace = false): void {
  impl(href, replace);
}

export function showError(root: HTMLElement, e: unknown): void {
  root.appendChild(h('div.card.error', { role: 'alert' }, h('h2', null, 'Cannot show this'), h('p', null, String((e as Error)?.message ?? e))));
}

export function isAbort(e: unknown): boolean {
  return (e as Error)?.name === 'AbortError';
}
