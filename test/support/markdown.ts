// Reads the repository's Markdown as GitHub renders it, for the docs tests: its
// headings' anchors (GitHub's slug rules, by github-slugger), its links, its
// inline code, its tables and its fenced code blocks, each with the line it is on.

import { readFileSync } from 'node:fs';
import path from 'node:path';
import GithubSlugger from 'github-slugger';
import { type Token, type Tokens, lexer } from 'marked';

export const ROOT = path.resolve(import.meta.dirname, '../..');

export interface Markdown {
  file: string;
  /** Every heading's anchor, as GitHub makes it (a repeated heading gets -1, -2…). */
  anchors: Set<string>;
  links: { href: string; line: number }[];
  /** Inline code spans (not fenced blocks), with the line each is on. */
  code: { text: string; line: number }[];
  blocks: { lang: string; text: string; line: number }[];
  /** Each table with the heading it sits under; cells as plain text, code spans kept in backticks. */
  tables: { heading: string; header: string[]; rows: string[][] }[];
}

/** A token's text as it reads on the page: code spans without their backticks, links as their text. */
function plain(tokens: Token[] | undefined): string {
  return (tokens ?? [])
    .map((t) => {
      if (t.type === 'codespan' || t.type === 'text' || t.type === 'escape') {
        return 'tokens' in t && t.tokens?.length ? plain(t.tokens) : decodeEntities((t as Tokens.Text).text);
      }
      if (t.type === 'html') return '';
      return plain('tokens' in t ? t.tokens : undefined);
    })
    .join('');
}

/** A cell's text with its code spans in backticks, so a test can tell `names` from prose. */
function cellText(tokens: Token[] | undefined): string {
  return (tokens ?? [])
    .map((t) => (t.type === 'codespan' ? `\`${decodeEntities(t.text)}\`` : 'tokens' in t ? cellText(t.tokens) : t.raw))
    .join('');
}

// marked escapes what it lexes as inline text; the page shows the characters.
const decodeEntities = (s: string) =>
  s.replace(/&(amp|lt|gt|quot|#39);/g, (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[e]!);

export function readMarkdown(relative: string): Markdown {
  const file = path.join(ROOT, relative);
  const source = readFileSync(file, 'utf8');
  const slugger = new GithubSlugger();
  const md: Markdown = { file: relative, anchors: new Set(), links: [], code: [], blocks: [], tables: [] };
  let heading = '';
  let offset = 0;
  const lineAt = (raw: string) => source.slice(0, source.indexOf(raw, offset)).split('\n').length;

  const inline = (tokens: Token[] | undefined, line: number) => {
    for (const t of tokens ?? []) {
      if (t.type === 'link' || t.type === 'image') md.links.push({ href: t.href, line });
      if (t.type === 'codespan') md.code.push({ text: decodeEntities(t.text), line });
      if ('tokens' in t) inline(t.tokens, line);
    }
  };
  const block = (t: Token, line: number) => {
    if (t.type === 'heading') {
      heading = plain(t.tokens);
      md.anchors.add(slugger.slug(heading));
      inline(t.tokens, line);
    } else if (t.type === 'code') {
      md.blocks.push({ lang: t.lang ?? '', text: t.text, line });
    } else if (t.type === 'table') {
      const table = t as Tokens.Table;
      for (const cell of [...table.header, ...table.rows.flat()]) inline(cell.tokens, line);
      md.tables.push({
        heading,
        header: table.header.map((c) => cellText(c.tokens)),
        rows: table.rows.map((r) => r.map((c) => cellText(c.tokens))),
      });
    } else if (t.type === 'list') {
      for (const item of (t as Tokens.List).items) for (const sub of item.tokens) block(sub, line);
    } else if ('tokens' in t) {
      inline(t.tokens, line);
    }
  };
  for (const t of lexer(source)) {
    const line = lineAt(t.raw);
    offset = Math.max(offset, source.indexOf(t.raw, offset));
    block(t, line);
  }
  return md;
}
