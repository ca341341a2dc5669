// Calls to the router's own API from the console page: same origin, the session cookie, JSON in and out.
// A refusal becomes an ApiError carrying the API's own code and message, which the page shows as worded.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message)
    this.status = status
    this.code = code
  }
}

export async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} }
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  let res
  try {
    res = await fetch(path, init)
  } catch (err) {
    throw new ApiError(0, 'network_error', `the router could not be reached: ${err.message}`)
  }
  const text = await res.text()
  let json = null
  try {
    json = JSON.parse(text)
  } catch {}
  if (!res.ok) {
    const error = json && json.error
    throw new ApiError(res.status, error ? error.code : `http_${res.status}`, error ? error.message : text || res.statusText)
  }
  return json
}

/** A tiny element builder: h('td', { class: 'num' }, '12'). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag)
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value)
    else if (name === 'value') el.value = value
    else el.setAttribute(name, value === true ? '' : String(value))
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue
    el.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
  return el
}

export function iso(text) {
  return text ? text.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–'
}

/** A table in a scrolling wrapper (narrow screens). */
export function table(caption, headers, rows) {
  return h('div', { class: 'table-wrap' },
    h('table', {},
      h('caption', { class: 'muted' }, caption),
      h('thead', {}, h('tr', {}, headers.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label ?? c)))),
      h('tbody', {}, rows.length === 0 ? h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'Nothing yet.')) : rows)))
}
