// notebook.mjs: Jupyter Notebook 6's page in a headless Chromium, driven through its UI as a
// user drives it: type in a cell and run it, click a toolbar button or a menu item, answer a
// dialog, press keys on a widget and read what it shows. Any modal dialog nobody answered fails the wait it appears in, with its title and
// text. The kernel's state is read from Notebook's JS only to wait for idle.
import { chromium } from 'playwright-core';

export const STEP_TIMEOUT_MS = 20000;
const POLL_MS = 100;

// Chromium as root, on a machine with no GPU and no network but 127.0.0.1. Playwright adds
// --headless, --no-sandbox (chromiumSandbox: false) and --user-data-dir itself.
const CHROMIUM_ARGS = ['--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// A browser on a fresh profile in userDataDir (an empty directory), with one page: call
// open(url) on it, and close() in the end.
export async function launch(userDataDir, timeoutMs = STEP_TIMEOUT_MS) {
    const context = await chromium.launchPersistentContext(userDataDir, {
        executablePath: '/usr/bin/chromium', headless: true, chromiumSandbox: false,
        args: CHROMIUM_ARGS, timeout: timeoutMs, viewport: { width: 1200, height: 900 },
    });
    context.setDefaultTimeout(timeoutMs); // every click and wait, too
    return new Notebook(context, context.pages()[0] ?? await context.newPage());
}

export class Notebook {
    constructor(context, page) {
        this.context = context;
        this.page = page;
    }

    // Opens a notebook's URL and waits for its kernel.
    async open(url, timeoutMs = STEP_TIMEOUT_MS) {
        await this.page.goto(url, { timeout: timeoutMs });
        await this.waitIdle(timeoutMs);
    }

    // The modal dialogs on screen: [{title, text, buttons}].
    dialogs() {
        return this.page.$$eval('.modal.in', (modals) => modals.map((m) => ({
            title: m.querySelector('.modal-title')?.innerText.trim() ?? '',
            text: m.querySelector('.modal-body')?.innerText.trim() ?? '',
            buttons: [...m.querySelectorAll('.modal-footer button')].map((b) => b.innerText.trim()),
        })));
    }

    // Polls check() until it returns something other than undefined/false, and returns that.
    // Fails when a dialog is on screen (nobody is going to answer it) or after timeoutMs.
    async waitFor(what, check, timeoutMs = STEP_TIMEOUT_MS) {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
            const shown = await this.dialogs();
            if (shown.length)
                throw new Error(`a dialog appeared while waiting for ${what}: ` +
                    shown.map((d) => `"${d.title}": ${d.text}`).join('; '));
            const value = await check();
            if (value !== undefined && value !== false)
                return value;
            if (Date.now() > deadline)
                throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
            await this.page.waitForTimeout(POLL_MS);
        }
    }

    // The kernel is connected, the kernel indicator says idle, and no request of the page's
    // waits for its reply or its status idle. The last part matters after a (re)connect: the indicator turns idle
    // at any status idle, Notebook's "kernel ready" (which also resolves a restart: Restart &
    // Clear Output clears then) is the kernel_info reply. A restart's click disconnects the
    // kernel at once, so after one this waits for the new kernel.
    waitIdle(timeoutMs) {
        return this.waitFor('the kernel to be connected and idle', () => this.page.evaluate(() => {
            const kernel = window.Jupyter?.notebook?.kernel;
            const icon = document.querySelector('#kernel_indicator_icon');
            return Boolean(kernel?.is_connected()) && icon.classList.contains('kernel_idle_icon') &&
                Object.values(kernel._msg_callbacks).every((c) => c.shell_done && c.iopub_done);
        }), timeoutMs);
    }

    // Types code into the last cell and runs it (Shift+Enter, which adds an empty cell below);
    // the text of its output area once its prompt shows an execution count and its idle came.
    async runCell(code, timeoutMs) {
        const cells = this.page.locator('#notebook-container .cell');
        const cell = cells.nth(await cells.count() - 1); // stays this cell when one is added
        await cell.locator('.CodeMirror').click();
        await this.page.keyboard.press('Control+A');
        await this.page.keyboard.insertText(code); // as a paste: no auto-closed brackets
        await this.page.keyboard.press('Shift+Enter');
        // Its reply sets the prompt; its output comes on iopub, a socket of its own that the
        // server may relay after the reply. The cell's idle (iopub_done) follows its output.
        await this.waitFor(`the cell ${JSON.stringify(code)} to finish`, async () =>
            /^In\s*\[\d+\]/.test((await cell.locator('.input_prompt').innerText()).trim()) &&
            this.page.evaluate(() => Object.values(window.Jupyter.notebook.kernel._msg_callbacks)
                .every((c) => c.shell_done && c.iopub_done)),
            timeoutMs);
        return this.outputOf(cell);
    }

    async outputOf(cell) {
        return (await cell.locator('.output_subarea').allInnerTexts()).join('').trim();
    }

    // The output text of every cell, in order.
    async outputs() {
        const cells = await this.page.locator('#notebook-container .cell').all();
        return Promise.all(cells.map((c) => this.outputOf(c)));
    }

    // The first element matching selector (a widget's part, say), once it is visible.
    async shown(selector, timeoutMs) {
        const el = this.page.locator(selector).first();
        await this.waitFor(`${selector} to show`, () => el.isVisible(), timeoutMs);
        return el;
    }

    // The text of the first element matching selector, once it is visible.
    async textOf(selector, timeoutMs) {
        return (await (await this.shown(selector, timeoutMs)).innerText()).trim();
    }

    // Focuses the first element matching selector and presses keys on it, one by one, as a
    // user who moves a slider's handle with the arrow keys.
    async pressOn(selector, keys, timeoutMs) {
        const el = await this.shown(selector, timeoutMs);
        await el.focus();
        for (const key of keys)
            await this.page.keyboard.press(key);
    }

    // A toolbar button, by its action (data-jupyter-action).
    clickToolbar(action) {
        return this.page.click(`#maintoolbar button[data-jupyter-action="${action}"]`);
    }

    // A menu item: the menu's link text ("Kernel"), then the item's ("Restart & Clear Output").
    async clickMenu(menu, item) {
        await this.page.click(`#menubar .dropdown-toggle:text-is("${menu}")`);
        await this.page.click(`#menubar .dropdown.open .dropdown-menu > li > a:text-is("${item}")`);
    }

    // Waits for the dialog titled `title` and clicks its button `button`; its text.
    async answerDialog(title, button, timeoutMs = STEP_TIMEOUT_MS) {
        const modal = this.page.locator('.modal.in').filter({
            has: this.page.locator(`.modal-title:text-is("${title}")`) });
        await modal.waitFor({ timeout: timeoutMs });
        const text = (await modal.locator('.modal-body').innerText()).trim();
        await modal.locator(`.modal-footer button:text-is("${button}")`).click();
        await modal.waitFor({ state: 'hidden', timeout: timeoutMs });
        return text;
    }

    async screenshot(path) {
        await this.page.screenshot({ path });
    }

    close() {
        return this.context.close();
    }
}
