// The server's reasons (why a job ended, waits, or is in use) are English
// sentences made of a few clauses joined by "; ". On the Chinese pages each
// clause the server is known to make is said in Chinese; a clause not listed
// here (a path, a message from uv or podman) stays as the server wrote it.
import { lang } from './i18n.js';

const SESSION = { notebook: '笔记本', shell: '终端' };
const STATES = { queued: '在排队', running: '在运行', succeeded: '已成功', failed: '已失败', cancelled: '已取消', preempted: '被抢占' };
const inUse = (s) => s
  .replace(/\b(\d+) clients? connected\b/g, '$1 个客户端已连接')
  .replace(/\b(\d+) kernels? running\b/g, '$1 个内核在运行')
  .replace(/\bGPU at (\d+)%/g, 'GPU 利用率 $1%')
  .replace(/\bnot idle yet\b/g, '尚未空闲')
  .replace(/, /g, '，');

// How an attempt ended, inside a longer clause: "(exit 0)", "(killed by signal 15 (SIGTERM))".
const how = (s) => s
  .replace(/\bkilled by signal (\d+) \((\w+)\)/g, '被信号 $1（$2）终止')
  .replace(/\bexit (\d+)\b/g, '退出码 $1');

// [pattern, Chinese] per clause; a function gets the match.
const CLAUSES = [
  [/^exit (\d+)$/, '退出码 $1'],
  [/^exit (\d+) \(after (\d+) retries\)$/, '退出码 $1（已重试 $2 次）'],
  [/^retry (\d+) of (\d+) in (\S+)$/, '$3 后进行第 $1 次重试（共 $2 次）'],
  [/^killed by signal (\d+) \((\w+)\)$/, '被信号 $1（$2）终止'],
  [/^killed by signal (\d+) \((\w+)\) \(after (\d+) retries\)$/, '被信号 $1（$2）终止（已重试 $3 次）'],
  [/^cancelled by (.+)$/, '由 $1 取消'],
  [/^time limit (\S+) reached$/, '达到时间上限 $1'],
  [/^preempted for job (\d+)$/, '为作业 $1 被抢占'],
  [/^requeued by the job \(exit 75\)$/, '作业请求重新排队（退出码 75）'],
  [/^requeued by the job \(exit 75, (\d+) in a row without a new checkpoint or metric\)$/, '作业请求重新排队（退出码 75，连续 $1 次没有新的检查点或指标）'],
  [/^starts again after (\S+)$/, '$1 后重新启动'],
  [/^requeued (\d+) times? without progress: no new checkpoint or metric, and it exited 75 again$/, '已重新排队 $1 次却没有进展（没有新的检查点或指标），且再次以 75 退出'],
  [/^not requeued further \(max_requeues_without_progress in gpuq\.toml\)$/, '不再重新排队（gpuq.toml 中的 max_requeues_without_progress）'],
  [/^is requeued by the job \(exit 75(?:, (\d+) in a row without a new checkpoint or metric)?\), waiting out its back-off until (\S+)$/, (m) => '作业请求重新排队（退出码 75' + (m[1] ? '，连续 ' + m[1] + ' 次没有新的检查点或指标' : '') + '），退避等待到 ' + m[2]],
  [/^requeued by (.+)$/, '由 $1 重新排队'],
  [/^ended before any signal \((.+)\)$/, (m) => '在发出任何信号前结束（' + how(m[1]) + '）'],
  [/^ended after the early signal SIG(\w+) \((.+)\)$/, (m) => '收到提前信号 SIG' + m[1] + ' 后结束（' + how(m[2]) + '）'],
  [/^ended after SIGTERM, within the grace period \((.+)\)$/, (m) => '收到 SIGTERM 后在宽限期内结束（' + how(m[1]) + '）'],
  [/^killed with SIGKILL after the grace period \((.+)\)$/, (m) => '宽限期过后被 SIGKILL 终止（' + how(m[1]) + '）'],
  [/^stopped idle: idle for (\S+) \((.+)\)$/, '因空闲而停止：已空闲 $1'],
  [/^(notebook|shell) starting$/, (m) => SESSION[m[1]] + '启动中'],
  [/^(notebook|shell) in use: (.+)$/, (m) => SESSION[m[1]] + '使用中：' + inUse(m[2])],
  [/^(notebook|shell) idle for (\S+)$/, (m) => SESSION[m[1]] + '已空闲 ' + m[2]],
  [/^stops in (\S+) unless used$/, '若不使用，$1 后停止'],
  [/^(notebook|shell): no client connected$/, (m) => SESSION[m[1]] + '：没有客户端连接'],
  [/^no idle stop$/, '不因空闲停止'],
  [/^image (\S+) is not on this node \((.+)\)\. Not retried: (.+)$/, '镜像 $1 不在本节点上（$2）。不会重试：请以作业用户身份先拉取（`podman pull $1`），再 `gpuq requeue`'],
  [/^could not start: (.+)$/, '无法启动：$1'],
  [/^cannot start: (.+)\. Not retried: fix the command, then `gpuq requeue`$/, '无法启动：$1。不会重试：请修正命令，再 `gpuq requeue`'],
  [/^cannot start: (.+)$/, '无法启动：$1'],
  [/^waits for (\d+) GPUs?$/, '等待 $1 块 GPU'],
  [/^waits for (\d+) GPUs?: (.+)$/, (m) => '等待 ' + m[1] + ' 块 GPU：' + holders(m[2])],
  [/^it is next, as soon as GPUs free up$/, '它排在下一个，GPU 一空出就启动'],
  [/^starts now: its GPUs are free$/, '马上启动：它的 GPU 已空闲'],
  [/^is about to start$/, '即将启动'],
  [/^waits for (?:job|task) (\S+) to succeed \(it is (\w+)\)$/, (m) => '等待作业 ' + m[1] + ' 成功（它现在' + (STATES[m[2]] || '是 ' + m[2]) + '）'],
  [/^is held by (.+)$/, '被 $1 暂缓'],
  [/^`gpuq release (\S+)` lets it start$/, '`gpuq release $1` 可让它启动'],
  [/^waits: the queue is drained for maintenance$/, '等待：队列因维护已暂停'],
  [/^`gpuq undrain` starts jobs again$/, '`gpuq undrain` 恢复启动作业'],
  [/^is a retry waiting out its back-off until (\S+)$/, '是一次重试，退避等待到 $1'],
  [/^is a retry waiting out its back-off until (\S+) \((.+)\)$/, (m) => '是一次重试，退避等待到 ' + m[1] + '（' + clauses(m[2]).map(clause).join('；') + '）'],
  [/^waits for the only job slot, which is busy$/, '等待唯一的作业槽（正被占用）'],
  [/^waits for a job slot: all (\d+) are busy$/, '等待作业槽：$1 个都被占用'],
  [/^waits: (\S+) already uses (.+) of a quota of (.+) at once$/, '等待：$1 已同时使用 $2（配额 $3）'],
];

// Who holds the GPUs a job waits for: "all 4 are in use by jobs 12 (alice, no time limit) and 13 (…)".
const holders = (s) => s
  .replace(/^all (\d+) are in use by /, '全部 $1 块都被占用：')
  .replace(/^(\d+) free, the others in use by /, '$1 块空闲，其余被占用：')
  .replace(/\bjobs? (\d+)/g, '作业 $1')
  .replace(/ends by (\S+) at its time limit/g, '$1 到达时间上限结束')
  .replace(/\bno time limit\b/g, '无时间上限')
  .replace(/\bstopping\b/g, '正在停止')
  .replace(/ and /g, ' 和 ')
  .replace(/, /g, '，');

function clause(c) {
  for (const [re, zh] of CLAUSES) {
    const m = re.exec(c);
    if (m) return typeof zh === 'function' ? zh(m) : c.replace(re, zh);
  }
  return c;
}

// A reason as the page's language says it (English: as the server wrote it).
export function reasonText(s) {
  if (!s || !lang().startsWith('zh')) return s;
  return clauses(s).map(clause).join('；');
}

// "; " splits clauses, but not inside parentheses ("(exit 1; retry 1 of 3 in 10s)").
function clauses(s) {
  const out = [];
  let depth = 0, start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '(') depth++;
    else if (c === ')') depth = Math.max(0, depth - 1);
    else if (c === ';' && s[i + 1] === ' ' && depth === 0) {
      out.push(s.slice(start, i));
      start = i + 2;
    }
  }
  out.push(s.slice(start));
  return out;
}
