/** Real HTTP against a stack for the auth, key and account tests: one call, its status, headers and JSON. */
import { request } from 'undici'
import { addr, startStack, type Stack } from '../helpers/stack.js'

export const MODEL = 'm-chat'
export const P = addr('a')

export interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  json: any
  text: string
}

export async function call(
  stack: Pick<Stack, 'url'>,
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT',
  path: string,
  options: { headers?: Record<string, string>; body?: unknown; raw?: string } = {},
): Promise<Answer> {
  const body = options.raw ?? (options.body === undefined ? undefined : JSON.stringify(options.body))
  const res = await request(stack.url + path, {
    method,
    headers: { ...(body !== undefined && { 'content-type': 'application/json' }), ...options.headers },
    ...(body !== undefined && { body }),
  })
  const text = await res.body.text()
  let json: unknown = null
  try {
    json = JSON.parse(text)
  } catch {}
  return { status: res.statusCode, headers: res.headers, text, json }
}

/** One chat completion with `headers` (no credential unless they carry one). */
export function chat(stack: Pick<Stack, 'url'>, headers: Record<string, string>, model = MODEL): Promise<Answer> {
  return call(stack, 'POST', '/v1/chat/completions', { headers, body: { model, messages: [{ role: 'user', content: 'hi' }] } })
}

/** A stack with one standard provider of MODEL. */
export function oneProviderStack(t: Parameters<typeof startStack>[0], config: Record<string, Record<string, unknown>> = {}): Promise<Stack> {
  return startStack(t, [{ address: P, models: [{ id: MODEL }] }], config)
}

/** The error envelope of DESIGN.md §4, checked whole. */
export function isError(answer: Answer, status: number, code: string): boolean {
  return (
    answer.status === status &&
    answer.json?.error?.code === code &&
    typeof answer.json?.error?.message === 'string' &&
    typeof answer.json?.error?.type === 'string' &&
    typeof answer.json?.request_id === 'string'
  )
}
