/**
 * Tool names as an OpenAI chat provider gets them, and back (one mechanism for both translations to chat): a
 * name OpenAI refuses (past 64 characters, or with characters outside `[a-zA-Z0-9_-]`) is renamed, and a tool
 * of a Responses `namespace` is flattened to `<namespace>__<name>` (renamed too when that is too long). The
 * map turns the provider's names back into the client's tool, namespace included, in the answer.
 */
import { createHash } from 'node:crypto'

/** OpenAI's tool-name rule. */
const OPENAI_NAME = /^[a-zA-Z0-9_-]{1,64}$/

/** A tool as the client named it. */
export interface ClientTool {
  readonly name: string
  readonly namespace?: string
  /** A Responses free-form (`custom`) tool, sent as a function of one string argument, `input`. */
  readonly custom?: true
}

/** Tool names as sent upstream, back to the client's tools (only names that had to change). */
export type ToolNames = Map<string, ClientTool>

/** The name the provider gets for the client's tool `name` (of `namespace`, when it is in one). */
export function upstreamToolName(name: string, names: ToolNames, namespace?: string, custom = false): string {
  const flat = namespace === undefined ? name : `${namespace}__${name}`
  const tool: ClientTool = namespace === undefined ? (custom ? { name, custom } : { name }) : custom ? { name, namespace, custom } : { name, namespace }
  if (OPENAI_NAME.test(flat)) {
    if (namespace !== undefined || custom) names.set(flat, tool)
    return flat
  }
  const hash = createHash('sha256').update(flat).digest('hex').slice(0, 8)
  const renamed = flat.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 55) + '_' + hash
  names.set(renamed, tool)
  return renamed
}

/** The client's tool for a name the provider used: the mapped one, or the name itself when it was not changed. */
export function clientTool(upstream: string, names: ToolNames): ClientTool {
  return names.get(upstream) ?? { name: upstream }
}
