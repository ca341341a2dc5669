// What every view shares: the one error area, the confirmation dialog and the show-once secret panel.
import { h } from './api.js'

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

