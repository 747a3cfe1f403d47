// Render every Markdown page of a report folder the way a reader sees it: Markdown with
// marked, every ```mermaid block with Mermaid in headless Chromium (puppeteer-core, the
// browser Debian ships). A diagram Mermaid cannot parse or lay out is an error, and so is
// a note box drawn over another or a note whose text runs past its box.
//
//   node report/check.mjs REPORT_DIR [--html OUT_DIR] [--chromium PATH]
//
// Prints one JSON object on stdout: {"pages", "diagrams", "errors": [{"page", "diagram",
// "message"}], "mermaid", "chromium", "seconds"}; progress goes to stderr. Exit 0 when
// every diagram renders, 1 when one does not, 2 on bad input (one line on stderr).
// With --html, each page is also written as a standalone HTML file with its diagrams
// inlined as SVG (links to .md pages point to the .html ones).

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { Marked } from 'marked';
import puppeteer from 'puppeteer-core';

const require = createRequire(import.meta.url);
const started = Date.now();

function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
let dir = null;
let htmlDir = null;
let chromium = process.env.CHROMIUM || '/usr/bin/chromium';
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--html') htmlDir = args[++i];
  else if (args[i] === '--chromium') chromium = args[++i];
  else if (dir === null) dir = args[i];
  else fail(`unexpected argument ${args[i]}`);
}
if (!dir || !fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) fail(`${dir}: not a report folder`);
if (!fs.existsSync(chromium)) fail(`${chromium}: no Chromium there; run \`make report-deps\` (apt-get install chromium)`);

function walk(folder) {
  return fs.readdirSync(folder, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(folder, e.name);
    if (e.isDirectory()) return full === htmlDir ? [] : walk(full);
    return e.name.endsWith('.md') ? [full] : [];
  });
}

const pages = walk(dir).sort();
const mermaidPath = require.resolve('mermaid/dist/mermaid.min.js');
const mermaidVersion = JSON.parse(fs.readFileSync(path.join(path.dirname(mermaidPath), '..', 'package.json'))).version;

// every page's Markdown as HTML, each mermaid block replaced by a placeholder
const rendered = pages.map((file) => {
  const diagrams = [];
  const renderer = {
    code({ text, lang }) {
      if (lang === 'mermaid') {
        diagrams.push(text);
        return `<div class="mermaid-diagram" id="diagram-${diagrams.length - 1}"></div>\n`;
      }
      return false; // marked's own rendering
    },
    link({ href, text }) {
      const target = href && !/^[a-z]+:/i.test(href) ? href.replace(/\.md(#|$)/, '.html$1') : href;
      return `<a href="${target}">${this.parser.parseInline(arguments[0].tokens)}</a>`;
    },
  };
  const html = new Marked({ gfm: true, renderer }).parse(fs.readFileSync(file, 'utf8'));
  return { file, html, diagrams };
});
const total = rendered.reduce((n, p) => n + p.diagrams.length, 0);

// SIGTERM (a CI timeout, report's cleanup, or the kernel when the Python parent dies):
// close the browser first, for at most 3 s. Chromium talks to us over a pipe (pipe: true),
// so if this process dies outright it ends too (over a WebSocket it would run on).
let browser = null;
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, async () => {
    const code = sig === 'SIGINT' ? 130 : 143;
    setTimeout(() => process.exit(code), 3000).unref();
    try { if (browser) await browser.close(); } finally { process.exit(code); }
  });
}
browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  pipe: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const errors = [];
let done = 0;
let version = '';
try {
  version = await browser.version();
  const page = await browser.newPage();
  await page.setContent('<!doctype html><html><body><div id="out"></div></body></html>');
  await page.addScriptTag({ content: fs.readFileSync(mermaidPath, 'utf8') });
  // GitHub renders with securityLevel strict; so do we
  await page.evaluate(() => mermaid.initialize({ startOnLoad: false, securityLevel: 'strict' }));
  // a note drawn over another hides what it says: lay the SVG out and measure the note boxes
  await page.evaluate(() => {
    window.noteOverlaps = (svg) => {
      const out = document.getElementById('out');
      out.innerHTML = svg;
      const notes = [...out.querySelectorAll('rect.note')];
      const boxes = notes.map((r) => r.getBoundingClientRect());
      const label = (r) => (r.parentNode.textContent || '').trim().slice(0, 50);
      const found = [];
      for (let a = 0; a < boxes.length; a++) {
        for (let b = a + 1; b < boxes.length; b++) {
          const p = boxes[a];
          const q = boxes[b];
          const eps = 0.5;
          if (p.left < q.right - eps && q.left < p.right - eps && p.top < q.bottom - eps && q.top < p.bottom - eps) {
            found.push(`"${label(notes[a])}" and "${label(notes[b])}"`);
          }
        }
      }
      // and a note's text that runs past its own box overlaps whatever is beside it
      notes.forEach((r) => {
        const box = r.getBoundingClientRect();
        for (const line of r.parentNode.querySelectorAll('text')) {
          const t = line.getBoundingClientRect();
          if (t.left < box.left - 0.5 || t.right > box.right + 0.5) {
            found.push(`"${label(r)}" runs ${Math.round(Math.max(box.left - t.left, t.right - box.right))} px past its box`);
            break;
          }
        }
      });
      out.innerHTML = '';
      return found;
    };
  });
  let lastReport = Date.now();
  for (const p of rendered) {
    const svgs = [];
    for (const [i, text] of p.diagrams.entries()) {
      const result = await page.evaluate(async (text, id) => {
        try {
          const { svg } = await mermaid.render(id, text);
          return { svg };
        } catch (e) {
          document.querySelectorAll(`#d${id}, #${id}`).forEach((n) => n.remove());
          return { error: String((e && e.message) || e) };
        }
      }, text, `d${done}`);
      done += 1;
      if (result.error) errors.push({ page: path.relative(dir, p.file), diagram: i + 1, message: result.error });
      else if (!result.svg.includes('<svg')) errors.push({ page: path.relative(dir, p.file), diagram: i + 1, message: 'no SVG produced' });
      else {
        const overlaps = await page.evaluate((svg) => noteOverlaps(svg), result.svg);
        if (overlaps.length) {
          errors.push({
            page: path.relative(dir, p.file),
            diagram: i + 1,
            message: `notes overlap: ${overlaps.slice(0, 3).join('; ')}`,
          });
        }
      }
      svgs.push(result.svg || `<pre>${result.error}</pre>`);
      if (Date.now() - lastReport > 1000) {
        process.stderr.write(`  rendered ${done}/${total} diagram(s)\n`);
        lastReport = Date.now();
      }
    }
    if (htmlDir) {
      const rel = path.relative(dir, p.file).replace(/\.md$/, '.html');
      const out = path.join(htmlDir, rel);
      fs.mkdirSync(path.dirname(out), { recursive: true });
      const body = p.html.replace(/<div class="mermaid-diagram" id="diagram-(\d+)"><\/div>/g, (_, n) => svgs[Number(n)]);
      fs.writeFileSync(out, `<!doctype html><html><head><meta charset="utf-8"><title>${rel}</title>` +
        '<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}' +
        'table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}' +
        'code{background:#f4f4f4}</style></head><body>' + body + '</body></html>\n');
    }
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify({
  pages: pages.length, diagrams: total, errors, mermaid: mermaidVersion, chromium: version,
  seconds: (Date.now() - started) / 1000,
}) + '\n');
process.exit(errors.length ? 1 : 0);
