// steps.mjs: runs a list of steps on one notebook page and reports each as a JSON line.
//   node steps.mjs URL USER_DATA_DIR FAILURE_SCREENSHOT < steps.json
// A step is one of: {"run": code} -> {"output": text}; {"toolbar": action};
// {"menu": [menu, item]}; {"dialog": title, "button": label} -> {"text": body};
// {"idle": true}; {"outputs": true} -> {"outputs": [text, ...]}; {"screenshot": path};
// {"read": selector} -> {"text": text} (of the first match, once visible);
// {"press": [key, ...], "on": selector} (keys pressed on the first match, focused).
// The first step that fails is reported as {"step", "error", "dialogs", "screenshot"}, and
// the exit status is 1.
import { readFileSync } from 'node:fs';
import { launch } from './notebook.mjs';

const [url, userDataDir, failureShot] = process.argv.slice(2);
const steps = JSON.parse(readFileSync(0, 'utf8'));
const report = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

async function perform(nb, step) {
    if ('run' in step) return { output: await nb.runCell(step.run) };
    if ('toolbar' in step) return nb.clickToolbar(step.toolbar);
    if ('menu' in step) return nb.clickMenu(...step.menu);
    if ('dialog' in step) return { text: await nb.answerDialog(step.dialog, step.button) };
    if ('idle' in step) return nb.waitIdle();
    if ('outputs' in step) return { outputs: await nb.outputs() };
    if ('screenshot' in step) return nb.screenshot(step.screenshot);
    if ('read' in step) return { text: await nb.textOf(step.read) };
    if ('press' in step) return nb.pressOn(step.on, step.press);
    throw new Error(`unknown step ${JSON.stringify(step)}`);
}

let nb = null;
let i = -1;
try {
    nb = await launch(userDataDir);
    await nb.open(url);
    report({ step: 'open' });
    for (i = 0; i < steps.length; i++)
        report({ step: i, ...steps[i], ...(await perform(nb, steps[i])) });
} catch (err) {
    const failure = { step: i < 0 ? 'open' : i, error: err.message.split('\n')[0] };
    if (nb) {
        failure.dialogs = await nb.dialogs().catch(() => []);
        failure.screenshot = await nb.screenshot(failureShot).then(() => failureShot, () => null);
    }
    report(failure);
    process.exitCode = 1;
} finally {
    await nb?.close();
}
