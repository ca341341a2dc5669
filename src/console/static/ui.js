// What every view shares: the one error area, the confirmation dialog and the show-once secret panel.
import { api, h } from './api.js'

const $ = (id) => document.getElementById(id)
let sessionLost = () => {}

/** What to do when the API says the session is gone (the shell shows the sign-in again). */
export function onSessionLost(fn) {
  sessionLost = fn
}

/** Shows an error as the API words it (its message; the code for reference). */
export function showError(err) {
  const box = $('error')
  box.replaceChildren(h('strong', {}, 'Error: '), err.message ?? String(err), err.code ? h('span', { class: 'muted' }, ` (${err.code})`) : '')
  box.hidden = false
  if (err.code === 'invalid_session') sessionLost()
}

export function clearError() {
  $('error').hidden = true
  $('error').replaceChildren()
}

/** Asks for confirmation in a modal dialog (keyboard: Tab between the buttons, Esc cancels). */
export function confirmAction(text, okLabel = 'Revoke') {
  const dialog = $('confirm')
  $('confirm-text').textContent = text
  $('confirm-ok').textContent = okLabel
  dialog.returnValue = ''
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true })
    dialog.showModal()
    $('confirm-cancel').focus()
  })
}

/** The secret of a new key, shown this once with a copy button. */
export function secretPanel(label, secret) {
  const status = h('span', { class: 'muted', 'aria-live': 'polite' })
  const code = h('code', { 'data-testid': 'secret' }, secret)
  const copy = h('button', {
    type: 'button',
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(secret)
        status.textContent = 'Copied.'
      } catch {
        // No clipboard permission: select the text so Ctrl+C copies it.
        const range = document.createRange()
        range.selectNodeContents(code)
        getSelection().removeAllRanges()
        getSelection().addRange(range)
        status.textContent = 'Selected: press Ctrl+C to copy.'
      }
    },
  }, 'Copy')
  const panel = h('div', { class: 'secret', role: 'status', tabindex: '-1' },
    h('strong', {}, `${label}: `), code, copy, status,
    h('p', { class: 'muted' }, 'This secret is shown only now. Store it somewhere safe: the router keeps only a hash.'))
  return panel
}

/**
 * What both key pages (API keys, management keys) share. `render(view)` draws the page; `path` is the
 * collection's API path (e.g. /v1/api-keys); `form(key, onSubmit, onCancel)` builds the create (key null) and
 * edit forms; `what` names the kind of key and `consequence` what revoking it does, in the confirmation.
 * Returns `create(body)` (POST, then the page again with the secret shown once in its `data-slot="reveal"`),
 * `actions(key)` (a row's Edit and Revoke buttons) and `editor`, where the edit form opens.
 */
export function keyPage({ view, render, path, what, consequence, form, focusAfterRevoke }) {
  const editor = h('div')

  const reload = async (focusSelector) => {
    await render(view)
    if (focusSelector) view.querySelector(focusSelector)?.focus()
  }

  async function create(body) {
    clearError()
    try {
      const created = await api('POST', path, body)
      await reload()
      const panel = secretPanel(`New ${what} "${created.name}"`, created.key)
      view.querySelector('[data-slot="reveal"]').replaceChildren(panel)
      panel.focus()
    } catch (err) {
      showError(err)
    }
  }

  function edit(key) {
    clearError()
    const f = form(key, async (body) => {
      try {
        await api('PATCH', `${path}/${key.key_id}`, body)
        await reload(`[data-edit="${key.key_id}"]`)
      } catch (err) {
        showError(err)
      }
    }, () => { editor.replaceChildren(); view.querySelector(`[data-edit="${key.key_id}"]`)?.focus() })
    editor.replaceChildren(h('section', { class: 'card', 'aria-label': `Edit ${key.name}` }, h('h2', {}, `Edit "${key.name}"`), f))
    f.querySelector('input').focus()
  }

  async function revoke(key) {
    clearError()
    if (!(await confirmAction(`Revoke the ${what} "${key.name}" (${key.key_preview})? ${consequence} This cannot be undone.`))) return
    try {
      await api('DELETE', `${path}/${key.key_id}`)
      await reload(focusAfterRevoke)
    } catch (err) {
      showError(err)
    }
  }

  const actions = (k) => (k.revoked ? '' : h('div', { class: 'actions' },
    h('button', { type: 'button', 'data-edit': k.key_id, onclick: () => edit(k) }, 'Edit', h('span', { class: 'sr-only' }, ` ${k.name}`)),
    h('button', { type: 'button', class: 'danger', 'data-revoke': k.key_id, onclick: () => revoke(k) }, 'Revoke', h('span', { class: 'sr-only' }, ` ${k.name}`))))

  return { create, actions, editor }
}
