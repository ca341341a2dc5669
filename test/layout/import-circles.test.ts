/**
 * The layout stays a stack (DESIGN.md §5-§8, README "Layout"): no file reaches itself through its imports,
 * type-only and lazy `import()` ones included. Read from the TypeScript sources, not the build, whose
 * JavaScript has lost the type-only imports.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

/** `from './x.js'` of an import or export statement, `import('./x.js')`, and `import './x.js'`. */
const SPECIFIERS = [/^\s*(?:import|export)\s[^'"]*?\sfrom\s*['"](\.{1,2}\/[^'"]+)['"]/gm, /\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g, /^\s*import\s*['"](\.{1,2}\/[^'"]+)['"]/gm]

function sources(dir: string, into: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    // Not the repository's sources: scratch (bench/e2e/.work holds the bench's Portkey install) and packages.
    if (entry.isDirectory()) {
      if (!entry.name.startsWith('.') && entry.name !== 'node_modules') sources(path, into)
    } else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) into.push(path)
  }
  return into
}

/** Each file's imports of files in the same set. */
function importGraph(files: readonly string[]): Map<string, string[]> {
  const known = new Set(files)
  const graph = new Map<string, string[]>()
  for (const file of files) {
    const text = readFileSync(file, 'utf8')
    const deps: string[] = []
    for (const pattern of SPECIFIERS) {
      for (const match of text.matchAll(pattern)) {
        const target = resolve(dirname(file), match[1]!.replace(/\.js$/, '.ts'))
        if (known.has(target)) deps.push(target)
      }
    }
    graph.set(file, deps)
  }
  return graph
}

/** The circles of `graph`: its strongly connected components of more than one file, or a file importing itself. */
export function importCircles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let next = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const circles: string[][] = []
  const visit = (file: string): void => {
    index.set(file, next)
    low.set(file, next++)
    stack.push(file)
    onStack.add(file)
    for (const dep of graph.get(file) ?? []) {
      if (!index.has(dep)) {
        visit(dep)
        low.set(file, Math.min(low.get(file)!, low.get(dep)!))
      } else if (onStack.has(dep)) low.set(file, Math.min(low.get(file)!, index.get(dep)!))
    }
    if (low.get(file) !== index.get(file)) return
    const component: string[] = []
    let member: string
    do {
      member = stack.pop()!
      onStack.delete(member)
      component.push(member)
    } while (member !== file)
    if (component.length > 1 || graph.get(file)!.includes(file)) circles.push(component.sort())
  }
  for (const file of graph.keys()) if (!index.has(file)) visit(file)
  return circles
}

t.test('the checker finds a circle, type-only, multi-line and lazy imports included', async (t) => {
  t.same(importCircles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]])), [['a', 'b', 'c']])
  t.same(importCircles(new Map([['a', ['b']], ['b', []]])), [])
  const dir = mkdtempSync(join(tmpdir(), 'import-circles-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = (name: string, text: string): string => {
    writeFileSync(join(dir, name), text)
    return join(dir, name)
  }
  const a = file('a.ts', "import type { B } from './b.js'\nexport type A = B\n")
  const b = file('b.ts', "export type B = number\nexport const load = () => import('./c.js')\n")
  const c = file('c.ts', "import {\n  type A,\n} from './a.js'\nexport const c: A = 1\n")
  const d = file('d.ts', "import './c.js'\n// import { nothing } from './d.js'\n")
  t.same(importCircles(importGraph([a, b, c, d])), [[a, b, c]])
})

for (const dir of ['src', 'bench']) {
  t.test(`no import circle in ${dir}/`, async (t) => {
    const files = sources(join(ROOT, dir))
    t.ok(files.length > 10, 'the sources are found')
    const circles = importCircles(importGraph(files)).map((c) => c.map((f) => relative(ROOT, f)))
    t.same(circles, [], circles.map((c) => c.join(' <-> ')).join('; '))
  })
}
