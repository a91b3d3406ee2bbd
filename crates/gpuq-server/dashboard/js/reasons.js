// The server's reasons (why a job ended, waits, or is in use) are English
// sentences made of a few clauses joined by "; ". On the Chinese pages each
// clause the server is known to make is said in Chinese; a clause not listed
// here (a path, a message from uv or podman) stays as the server wrote it.
import { lang } from './i18n.js';

const SESSION = { notebook: '笔记本', shell: '终端' };
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
  [/^cannot start: (.+)$/, '无法启动：$1'],
  [/^waits for (\d+) GPUs?$/, '等待 $1 块 GPU'],
  [/^waits for (\d+) GPUs?: (.+)$/, '等待 $1 块 GPU：$2'],
  [/^it is next, as soon as GPUs free up$/, '它排在下一个，GPU 一空出就启动'],
];

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
  return s.split('; ').map(clause).join('；');
}
