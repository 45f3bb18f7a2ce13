// `handset completion bash|zsh`: a shell completion script made from the command
// tree itself (every command, subcommand, flag and listed value), so it can never
// fall behind the commands. Both scripts walk the words typed so far to find the
// command being completed, then offer its words.

import type { Command } from 'commander';

export const SHELLS = ['bash', 'zsh'] as const;
export type Shell = (typeof SHELLS)[number];

/** Extra words a command's operand can be, keyed by its path below the root ("trigger"). */
export type OperandWords = Record<string, readonly string[]>;

interface Node {
  path: string;
  words: string[];
}

function nodes(cmd: Command, operands: OperandWords, prefix = ''): Node[] {
  const subs = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
  const words = [
    ...subs.map((c) => c.name()),
    ...(subs.length ? ['help'] : []),
    ...cmd.registeredArguments.flatMap((a) => a.argChoices ?? []),
    ...(operands[prefix.trim()] ?? []),
    ...cmd.options.filter((o) => !o.hidden).flatMap((o) => [o.long, o.short].filter((f): f is string => !!f)),
    '--help',
    '-h',
  ];
  return [{ path: prefix, words }, ...subs.flatMap((c) => nodes(c, operands, `${prefix} ${c.name()}`))];
}

export function completionScript(shell: Shell, program: Command, operands: OperandWords = {}): string {
  const all = nodes(program, operands);
  const name = program.name();
  const fn = `_${name.replace(/\W/g, '_')}`;
  const paths = all.filter((n) => n.path !== '').map((n) => `"${n.path}"`);
  const cases = all.map((n) => `    "${n.path}") c="${n.words.join(' ')}" ;;`).join('\n');
  // Both shells: find the command among the words before the cursor, then offer its words in c.
  const walk = (first: number, before: string, word: string) => `  local p="" w i c
  for ((i = ${first}; i < ${before}; i++)); do
    w="${word}"
    case "$p $w" in
      ${paths.join('|')}) p="$p $w" ;;
    esac
  done
  case "$p" in
${cases}
  esac`;
  if (shell === 'bash') {
    return `# ${name} completion for bash: eval "$(${name} completion bash)" (e.g. in ~/.bashrc)
${fn}() {
  local cur="\${COMP_WORDS[COMP_CWORD]}"
${walk(1, 'COMP_CWORD', `\${COMP_WORDS[i]}`)}
  COMPREPLY=($(compgen -W "$c" -- "$cur"))
}
complete -F ${fn} ${name}
`;
  }
  return `#compdef ${name}
# ${name} completion for zsh: source <(${name} completion zsh) (e.g. in ~/.zshrc, after compinit)
${fn}() {
${walk(2, 'CURRENT', `\${words[i]}`)}
  compadd -- \${=c}
}
compdef ${fn} ${name}
`;
}
