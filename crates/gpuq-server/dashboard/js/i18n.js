// Every string the dashboard shows, in English and Chinese. The language comes
// from localStorage `gpuq.lang`, else the browser's languages (zh* → 中文).
const KEY = 'gpuq.lang';
export const LANGS = [['en', 'English'], ['zh-CN', '中文']];

const en = {
  'nav.label': 'Sections', 'nav.queue': 'Queue', 'nav.gpus': 'GPUs', 'nav.sweeps': 'Sweeps', 'nav.cost': 'Cost', 'nav.alerts': 'Alerts', 'nav.sessions': 'Sessions',
  'run.title': 'Run {id}', 'run.experimentOnly': 'Experiment {id}: its runs are jobs, in the queue (filter by project).', 'run.info': 'Run',
  'run.name': 'Name', 'run.experiment': 'Experiment', 'run.key': 'Key', 'run.value': 'Value', 'run.step': 'Step', 'run.metrics': 'Latest metrics', 'run.tags': 'Tags',
  'nav.job': 'Job', 'nav.sweep': 'Sweep',
  'lang.label': 'Language', logout: 'Log out', admin: 'admin', loading: 'Loading…', notfound: 'Page not found', close: 'Close',
  yes: 'yes', perHour: '/h', 'unit.gpuh': 'GPU-h', 'live.title': 'Live updates (event stream)',
  'err.network': 'Cannot reach the gpuq daemon. Is it running?', 'err.session': 'Your session has ended; log in again.',
  'err.http': 'The daemon answered HTTP {status}.',
  'state.queued': 'queued', 'state.running': 'running', 'state.succeeded': 'succeeded', 'state.failed': 'failed',
  'state.cancelled': 'cancelled', 'state.preempted': 'preempted', 'state.lost': 'lost',
  'prio.low': 'low', 'prio.normal': 'normal', 'prio.high': 'high',
  'col.id': 'ID', 'col.name': 'Name', 'col.state': 'State', 'col.user': 'User', 'col.project': 'Project', 'col.gpus': 'GPUs',
  'col.runtime': 'Runtime', 'col.reason': 'Reason', 'col.cost': 'Cost', 'col.time': 'Time', 'col.job': 'Job',
  'action.cancel': 'Cancel', 'action.hold': 'Hold', 'action.release': 'Release', 'action.requeue': 'Requeue',
  'action.cancel.title': 'Cancel the job (a running one gets SIGTERM, then SIGKILL after its grace period)',
  'action.hold.title': 'Keep this queued job from starting', 'action.release.title': 'Let this held job start',
  'action.requeue.title': 'Queue the job again (a running one is stopped first and resumes from its checkpoint)',
  'confirm.cancel': 'Cancel job {job}? A running job is stopped.', 'confirm.hold': 'Hold job {job}? It will not start until released.',
  'confirm.release': 'Release job {job}? It may start at once.', 'confirm.requeue': 'Requeue job {job}? A running job is stopped and queued again.',
  'confirm.yes': 'Yes', 'confirm.no': 'Keep it',
  'done.cancel': 'Job {job}: cancel requested.', 'done.hold': 'Job {job} is held.', 'done.release': 'Job {job} is released.',
  'done.requeue': 'Job {job} is queued again.',
  'queue.anyUser': 'any user', 'queue.anyProject': 'any project', 'queue.mine': 'My jobs', 'queue.clear': 'Clear filters',
  'queue.newer': 'Newer', 'queue.older': 'Older', 'queue.none': 'No jobs yet. Submit one with gpuq submit.',
  'queue.noneMatch': 'No job matches these filters.', 'queue.total': '{n} jobs', 'queue.total.one': '1 job', 'queue.range': '{from}–{to} of {total}',
  'queue.pageOf': '{n} jobs on this page', 'queue.held': 'held', 'queue.heldBy': 'held by {who}', 'queue.drained': 'Queue drained',
  'job.title': 'Job {id}', 'job.metrics': 'Metrics', 'job.log': 'Log', 'job.gpu': 'GPU use', 'job.costAdvice': 'Cost and advice',
  'job.attempts': 'Attempts', 'job.events': 'Events', 'job.repro': 'Reproducibility', 'job.attempt': 'Attempt',
  'job.follow': 'Follow', 'job.latest': 'latest', 'job.node': 'Node', 'job.priority': 'Priority', 'job.submitted': 'Submitted',
  'job.started': 'Started', 'job.ended': 'Ended', 'job.failures': '{n} failed', 'job.retries': '{n} retries allowed',
  'job.timeLimit': 'Time limit', 'job.exit': 'Exit', 'job.exitCode': 'exit {code}', 'job.signal': 'signal {sig}',
  'job.array': 'Array', 'job.after': 'After', 'job.preemptible': 'Preemptible', 'job.why': 'Why it waits',
  'job.command': 'Command', 'job.cwd': 'Directory', 'job.params': 'Parameters', 'job.env': 'Environment',
  'job.noEnv': 'none set by the spec', 'job.duration': 'Duration', 'job.endCause': 'End cause', 'job.utilAvg': 'Avg util',
  'job.utilPeak': 'Peak util', 'job.memPeak': 'Peak GPU memory', 'job.rate': 'Price', 'job.noAttempts': 'Not started yet.',
  'job.memory': 'Memory', 'job.cpu': 'CPU', 'job.hostMem': 'Memory (peak / limit)', 'job.cpuTime': 'CPU time',
  'job.memAsked': 'asked {limit}, peaked at {peak}', 'job.memGiven': 'given {limit}, peaked at {peak}',
  'job.memNoLimit': 'peaked at {peak} (no limit of its own)', 'job.oom': 'out of memory at its limit',
  'job.cores': '{n} cores', 'job.cores.one': '1 core', 'job.noCores': 'no reserved cores',
  'job.coreHours': '{h} core-hours', 'job.coreMinutes': '{n} core-minutes', 'job.coreSeconds': '{n} core-seconds',
  'job.coresBusy': '{n} busy on average',
  'job.kind': 'Event', 'job.detail': 'Detail', 'job.logTrimmed': 'Only the last 2 MB of the log are shown.',
  'job.logEmpty': 'The log is empty.', 'job.logNotYours': 'Only its owner ({user}) or an admin may read this job\'s log.', 'job.neverStarted': 'The job never started: it has no log.', 'job.logComplete': 'complete', 'job.logLive': 'live', 'job.logWaiting': 'waiting for the job to start',
  'job.noMetrics': 'This job has no tracked run.', 'job.noMetricsYet': 'No metrics logged yet (gpuq.log, GPUQ_METRICS_FILE or MLflow).', 'job.noMetricsEnded': 'This job logged no metrics.',
  'job.pickMetric': 'Pick a metric above.', 'job.gpuHours': 'GPU-hours', 'job.energy': 'Energy',
  'job.noTelemetry': 'No GPU telemetry for this job.', 'job.noHistory': 'No GPU history for this window (history is kept for 24 h).',
  'job.noPrice': 'no price for its node',
  'chart.log': 'Log scale', 'chart.smoothing': 'Smoothing', 'chart.smoothed': 'smoothed', 'chart.step': 'step', 'chart.time': 'time',
  'chart.downsampled': 'downsampled from {n} points',
  'advice.gpu': 'GPU', 'advice.mem': 'Memory', 'advice.price': 'Price', 'advice.offer': 'Offer', 'advice.time': 'Time', 'advice.cost': 'Est. cost',
  'repro.none': 'No capture was recorded at submit.', 'repro.captured': 'Captured', 'repro.host': 'Host', 'repro.commit': 'Commit',
  'repro.branch': 'Branch', 'repro.remote': 'Remote', 'repro.root': 'Checkout', 'repro.dirty': 'Working tree',
  'repro.dirtyYes': 'dirty', 'repro.clean': 'clean', 'repro.diff': 'Diff', 'repro.diffSize': '{n} bytes', 'repro.truncated': 'truncated',
  'repro.untracked': 'Untracked', 'repro.withheld': "hidden: its owner's and admins' only", 'repro.noGit': 'Not in a git checkout.', 'repro.version': 'Version', 'repro.executable': 'Interpreter',
  'repro.venv': 'Environment', 'repro.lock': 'Lock file', 'repro.packages': 'Packages', 'repro.noPython': 'No Python interpreter found.',
  'repro.env': 'Environment at submit ({n} variables)', 'repro.runtime': 'Where each attempt ran', 'repro.driver': 'Driver',
  'gpu.util': 'Utilisation', 'gpu.memory': 'Memory', 'gpu.temp': 'Temperature', 'gpu.power': 'Power', 'gpu.utilMem': 'Utilisation and memory (%)',
  'gpu.tempPower': 'Temperature (°C) and power (W)', 'gpu.busy': 'in use', 'gpu.free': 'free', 'gpu.lost': 'lost',
  'gpu.none': 'This daemon schedules no GPUs.', 'gpu.noHistory': 'No readings in this window yet.',
  'gpu.window.15m': '15 min', 'gpu.window.24h': '24 h',
  'alert.job_idle': 'job idle', 'alert.gpu_memory_high': 'memory high', 'alert.gpu_temperature_high': 'temperature high',
  'alert.gpu_xid': 'XID error', 'alert.gpu_lost': 'GPU lost', 'alert.job_failed': 'job failed', 'alert.job_oom': 'out of memory',
  'alert.budget': 'budget', 'alert.node_idle': 'node idle', 'alert.session_idle': 'session idle', 'alert.metrics_dropped': 'metrics dropped',
  'sessions.help': 'Notebooks (gpuq notebook) and shells (gpuq shell) on reserved GPUs. An idle one (no code ran, no client connected, its GPUs idle) is stopped after its idle stop.',
  'sessions.starting': 'starting', 'sessions.idle': 'idle {span}', 'sessions.stops': 'stops in {span}', 'sessions.in_use': 'in use', 'sessions.by_clients': '{n} clients', 'sessions.by_clients.one': '1 client', 'sessions.by_kernels': '{n} kernels running', 'sessions.by_kernels.one': '1 kernel running', 'sessions.by_gpu': 'GPU at {pct}%', 'sessions.by_sep': ': ', 'sessions.by_join': ', ',
  'sessions.open': 'Open', 'sessions.never': 'never', 'sessions.kind': 'Kind', 'sessions.kind.notebook': 'notebook', 'sessions.kind.shell': 'shell',
  'sessions.clients': 'Clients', 'sessions.idle_stop': 'Idle stop', 'sessions.none': 'No sessions run.',
  'alerts.all': 'All kinds', 'alerts.kind': 'Kind', 'alerts.message': 'Message', 'alerts.none': 'No alerts.', 'alerts.count': '{n} alerts', 'alerts.count.one': '1 alert',
  'sweep.title': 'Sweep {id}', 'sweep.searcher': 'Searcher', 'sweep.metric': 'Metric', 'sweep.best': 'Best', 'sweep.trials': 'Trials',
  'sweep.budget': 'Budget used', 'sweep.created': 'Created', 'sweep.none': 'No sweeps yet. Start one with gpuq sweep FILE.',
  'sweep.trialN': 'trial {n}', 'sweep.activeN': '{n} active', 'sweep.concurrent': 'at most {n} at once', 'sweep.seed': 'Seed',
  'sweep.run': 'Tracking run', 'sweep.charts': 'Search', 'sweep.rungs': 'Rungs', 'sweep.trial': 'Trial', 'sweep.job': 'Job',
  'sweep.rung': 'Rung', 'sweep.attempts': 'Attempts', 'sweep.stepN': 'step {n}', 'sweep.noTrials': 'No trials yet.',
  'sweep.step': 'Step', 'sweep.reached': 'Reached', 'sweep.here': 'At this rung now', 'sweep.bestHere': 'Best here',
  'sweep.bestSoFar': 'Best so far', 'sweep.noValues': 'No trial has reported the metric yet.',
  'sweep.state.running': 'running', 'sweep.state.done': 'done', 'sweep.state.cancelled': 'cancelled', 'sweep.state.budget': 'budget reached',
  'trial.state.queued': 'queued', 'trial.state.running': 'running', 'trial.state.paused': 'paused', 'trial.state.completed': 'completed',
  'trial.state.failed': 'failed', 'trial.state.stopped': 'stopped', 'trial.state.cancelled': 'cancelled',
  'cost.month': 'Month', 'cost.current': 'This month', 'cost.budgets': 'Budgets', 'cost.byDay': 'By day', 'cost.byUser': 'By user',
  'cost.byProject': 'By project', 'cost.byUserTime': 'By user, day by day', 'cost.byProjectTime': 'By project, day by day', 'cost.others': 'others', 'cost.gpuHours': 'GPU-hours', 'cost.usedHours': 'Used GPU-h', 'cost.attempts': 'Attempts',
  'cost.unpriced': 'Unpriced GPU-h', 'cost.unit.usd': 'US$', 'cost.unit.gpuHours': 'GPU-hours (no price set)', 'cost.none': '(no project)', 'cost.nothing': 'Nothing was spent in this window.',
  'cost.noBudgets': 'No budgets are set ([[budgets]] in gpuq.toml).', 'cost.left': '{left} left', 'cost.until': 'period ends',
  'cost.window': 'Window', 'cost.total': 'Total', 'cost.pricing': 'Pricing',
  'cost.scope.user': 'user', 'cost.scope.project': 'project', 'cost.period.day': 'daily', 'cost.period.week': 'weekly',
  'cost.period.month': 'monthly', 'cost.action.refuse': 'refuses new jobs at 100%', 'cost.action.hold': 'holds new jobs at 100%',
  'cost.action.stop': 'stops jobs at 100%',
};

const zh = {
  'nav.label': '导航', 'nav.queue': '队列', 'nav.gpus': 'GPU', 'nav.sweeps': '超参搜索', 'nav.cost': '费用', 'nav.alerts': '告警', 'nav.sessions': '会话',
  'run.title': '运行 {id}', 'run.experimentOnly': '实验 {id}：它的运行都是作业，在队列里（按项目筛选）。', 'run.info': '运行',
  'run.name': '名称', 'run.experiment': '实验', 'run.key': '键', 'run.value': '值', 'run.step': '步', 'run.metrics': '最新指标', 'run.tags': '标签',
  'nav.job': '作业', 'nav.sweep': '搜索',
  'lang.label': '语言', logout: '退出登录', admin: '管理员', loading: '加载中…', notfound: '页面不存在', close: '关闭',
  yes: '是', perHour: '/小时', 'unit.gpuh': 'GPU 小时', 'live.title': '实时更新（事件流）',
  'err.network': '无法连接 gpuq 守护进程，它在运行吗？', 'err.session': '会话已结束，请重新登录。',
  'err.http': '守护进程返回 HTTP {status}。',
  'state.queued': '排队中', 'state.running': '运行中', 'state.succeeded': '已成功', 'state.failed': '已失败',
  'state.cancelled': '已取消', 'state.preempted': '被抢占', 'state.lost': '已丢失',
  'prio.low': '低', 'prio.normal': '普通', 'prio.high': '高',
  'col.id': 'ID', 'col.name': '名称', 'col.state': '状态', 'col.user': '用户', 'col.project': '项目', 'col.gpus': 'GPU',
  'col.runtime': '运行时长', 'col.reason': '原因', 'col.cost': '费用', 'col.time': '时间', 'col.job': '作业',
  'action.cancel': '取消', 'action.hold': '挂起', 'action.release': '放行', 'action.requeue': '重新排队',
  'action.cancel.title': '取消作业（运行中的作业先收到 SIGTERM，宽限期后 SIGKILL）',
  'action.hold.title': '让这个排队中的作业暂不启动', 'action.release.title': '让这个被挂起的作业可以启动',
  'action.requeue.title': '重新排队（运行中的作业先停止，之后从检查点恢复）',
  'confirm.cancel': '取消作业 {job}？运行中的作业会被停止。', 'confirm.hold': '挂起作业 {job}？放行之前它不会启动。',
  'confirm.release': '放行作业 {job}？它可能立即启动。', 'confirm.requeue': '重新排队作业 {job}？运行中的作业会被停止后重新排队。',
  'confirm.yes': '确定', 'confirm.no': '保留',
  'done.cancel': '作业 {job}：已请求取消。', 'done.hold': '作业 {job} 已挂起。', 'done.release': '作业 {job} 已放行。',
  'done.requeue': '作业 {job} 已重新排队。',
  'queue.anyUser': '所有用户', 'queue.anyProject': '所有项目', 'queue.mine': '我的作业', 'queue.clear': '清除筛选',
  'queue.newer': '较新', 'queue.older': '较早', 'queue.none': '还没有作业。用 gpuq submit 提交一个。',
  'queue.noneMatch': '没有符合筛选条件的作业。', 'queue.total': '共 {n} 个作业', 'queue.range': '第 {from}–{to} 个，共 {total} 个',
  'queue.pageOf': '本页 {n} 个作业', 'queue.held': '已挂起', 'queue.heldBy': '被 {who} 挂起', 'queue.drained': '队列已暂停',
  'job.title': '作业 {id}', 'job.metrics': '指标', 'job.log': '日志', 'job.gpu': 'GPU 使用', 'job.costAdvice': '费用与建议',
  'job.attempts': '尝试', 'job.events': '事件', 'job.repro': '可复现性', 'job.attempt': '尝试',
  'job.follow': '自动滚动', 'job.latest': '最新', 'job.node': '节点', 'job.priority': '优先级', 'job.submitted': '提交时间',
  'job.started': '开始时间', 'job.ended': '结束时间', 'job.failures': '失败 {n} 次', 'job.retries': '允许重试 {n} 次',
  'job.timeLimit': '时间限制', 'job.exit': '退出', 'job.exitCode': '退出码 {code}', 'job.signal': '信号 {sig}',
  'job.array': '作业数组', 'job.after': '依赖', 'job.preemptible': '可抢占', 'job.why': '等待原因',
  'job.command': '命令', 'job.cwd': '工作目录', 'job.params': '参数', 'job.env': '环境变量',
  'job.noEnv': '作业描述未设置', 'job.duration': '时长', 'job.endCause': '结束原因', 'job.utilAvg': '平均利用率',
  'job.utilPeak': '峰值利用率', 'job.memPeak': '峰值显存', 'job.rate': '价格', 'job.noAttempts': '尚未启动。',
  'job.memory': '内存', 'job.cpu': 'CPU', 'job.hostMem': '内存（峰值 / 上限）', 'job.cpuTime': 'CPU 时间',
  'job.memAsked': '申请 {limit}，峰值 {peak}', 'job.memGiven': '分配 {limit}，峰值 {peak}',
  'job.memNoLimit': '峰值 {peak}（无单独上限）', 'job.oom': '达到上限，内存不足',
  'job.cores': '{n} 核', 'job.noCores': '未预留核',
  'job.coreHours': '{h} 核·小时', 'job.coreMinutes': '{n} 核·分钟', 'job.coreSeconds': '{n} 核·秒',
  'job.coresBusy': '平均 {n} 核忙碌',
  'job.kind': '事件', 'job.detail': '详情', 'job.logTrimmed': '只显示日志的最后 2 MB。',
  'job.logEmpty': '日志为空。', 'job.logNotYours': '只有作业的所有者（{user}）或管理员可以查看它的日志。', 'job.neverStarted': '作业从未启动，没有日志。', 'job.logComplete': '已完整', 'job.logLive': '实时', 'job.logWaiting': '等待作业启动',
  'job.noMetrics': '这个作业没有跟踪记录。', 'job.noMetricsYet': '还没有记录指标（gpuq.log、GPUQ_METRICS_FILE 或 MLflow）。', 'job.noMetricsEnded': '这个作业没有记录指标。',
  'job.pickMetric': '请在上方选择指标。', 'job.gpuHours': 'GPU 小时', 'job.energy': '能耗',
  'job.noTelemetry': '没有这个作业的 GPU 遥测数据。', 'job.noHistory': '这段时间没有 GPU 历史（历史只保留 24 小时）。',
  'job.noPrice': '所在节点没有价格',
  'chart.log': '对数坐标', 'chart.smoothing': '平滑', 'chart.smoothed': '平滑后', 'chart.step': '步', 'chart.time': '时间',
  'chart.downsampled': '由 {n} 个点降采样',
  'advice.gpu': 'GPU', 'advice.mem': '显存', 'advice.price': '价格', 'advice.offer': '报价', 'advice.time': '耗时', 'advice.cost': '预计费用',
  'repro.none': '提交时没有记录快照。', 'repro.captured': '记录时间', 'repro.host': '主机', 'repro.commit': '提交',
  'repro.branch': '分支', 'repro.remote': '远程仓库', 'repro.root': '仓库目录', 'repro.dirty': '工作区',
  'repro.dirtyYes': '有未提交修改', 'repro.clean': '干净', 'repro.diff': '差异', 'repro.diffSize': '{n} 字节', 'repro.truncated': '已截断',
  'repro.untracked': '未跟踪文件', 'repro.withheld': '已隐藏：仅作业所有者和管理员可见', 'repro.noGit': '不在 git 仓库中。', 'repro.version': '版本', 'repro.executable': '解释器',
  'repro.venv': '虚拟环境', 'repro.lock': '锁文件', 'repro.packages': '软件包', 'repro.noPython': '没有找到 Python 解释器。',
  'repro.env': '提交时的环境（{n} 个变量）', 'repro.runtime': '每次尝试的运行环境', 'repro.driver': '驱动',
  'gpu.util': '利用率', 'gpu.memory': '显存', 'gpu.temp': '温度', 'gpu.power': '功率', 'gpu.utilMem': '利用率与显存（%）',
  'gpu.tempPower': '温度（°C）与功率（W）', 'gpu.busy': '使用中', 'gpu.free': '空闲', 'gpu.lost': '已丢失',
  'gpu.none': '这个守护进程不调度 GPU。', 'gpu.noHistory': '这段时间还没有读数。',
  'gpu.window.15m': '15 分钟', 'gpu.window.24h': '24 小时',
  'alert.job_idle': '作业空闲', 'alert.gpu_memory_high': '显存过高', 'alert.gpu_temperature_high': '温度过高',
  'alert.gpu_xid': 'XID 错误', 'alert.gpu_lost': 'GPU 丢失', 'alert.job_failed': '作业失败', 'alert.job_oom': '显存不足',
  'alert.budget': '预算', 'alert.node_idle': '节点空闲', 'alert.session_idle': '会话空闲', 'alert.metrics_dropped': '指标已丢弃',
  'sessions.help': '在预留 GPU 上运行的笔记本（gpuq notebook）和终端（gpuq shell）。空闲（没有代码运行、没有客户端连接、GPU 空闲）超过空闲停止时间的会话会被停止。',
  'sessions.starting': '启动中', 'sessions.idle': '空闲 {span}', 'sessions.stops': '{span} 后停止', 'sessions.in_use': '使用中', 'sessions.by_clients': '{n} 个客户端', 'sessions.by_kernels': '{n} 个内核在运行', 'sessions.by_gpu': 'GPU 利用率 {pct}%', 'sessions.by_sep': '：', 'sessions.by_join': '，',
  'sessions.open': '打开', 'sessions.never': '从不', 'sessions.kind': '类型', 'sessions.kind.notebook': '笔记本', 'sessions.kind.shell': '终端',
  'sessions.clients': '客户端', 'sessions.idle_stop': '空闲停止', 'sessions.none': '没有运行中的会话。',
  'alerts.all': '全部类型', 'alerts.kind': '类型', 'alerts.message': '消息', 'alerts.none': '没有告警。', 'alerts.count': '{n} 条告警',
  'sweep.title': '搜索 {id}', 'sweep.searcher': '搜索算法', 'sweep.metric': '指标', 'sweep.best': '最佳', 'sweep.trials': '试验',
  'sweep.budget': '预算用量', 'sweep.created': '创建时间', 'sweep.none': '还没有超参搜索。用 gpuq sweep FILE 开始一个。',
  'sweep.trialN': '试验 {n}', 'sweep.activeN': '{n} 个进行中', 'sweep.concurrent': '最多同时 {n} 个', 'sweep.seed': '随机种子',
  'sweep.run': '跟踪记录', 'sweep.charts': '搜索过程', 'sweep.rungs': '阶梯（rung）', 'sweep.trial': '试验', 'sweep.job': '作业',
  'sweep.rung': '阶梯', 'sweep.attempts': '尝试次数', 'sweep.stepN': '第 {n} 步', 'sweep.noTrials': '还没有试验。',
  'sweep.step': '步数', 'sweep.reached': '已到达', 'sweep.here': '当前在此阶梯', 'sweep.bestHere': '此阶梯最佳',
  'sweep.bestSoFar': '迄今最佳', 'sweep.noValues': '还没有试验报告指标。',
  'sweep.state.running': '运行中', 'sweep.state.done': '已完成', 'sweep.state.cancelled': '已取消', 'sweep.state.budget': '预算已用完',
  'trial.state.queued': '排队中', 'trial.state.running': '运行中', 'trial.state.paused': '已暂停', 'trial.state.completed': '已完成',
  'trial.state.failed': '已失败', 'trial.state.stopped': '已淘汰', 'trial.state.cancelled': '已取消',
  'cost.month': '月份', 'cost.current': '本月', 'cost.budgets': '预算', 'cost.byDay': '按天', 'cost.byUser': '按用户',
  'cost.byProject': '按项目', 'cost.byUserTime': '按用户，逐日', 'cost.byProjectTime': '按项目，逐日', 'cost.others': '其他', 'cost.gpuHours': 'GPU 小时', 'cost.usedHours': '实际使用 GPU 小时', 'cost.attempts': '尝试次数',
  'cost.unpriced': '无价格 GPU 小时', 'cost.unit.usd': '美元', 'cost.unit.gpuHours': 'GPU 小时（未设价格）', 'cost.none': '（无项目）', 'cost.nothing': '这段时间没有花费。',
  'cost.noBudgets': '没有设置预算（gpuq.toml 中的 [[budgets]]）。', 'cost.left': '剩余 {left}', 'cost.until': '周期结束于',
  'cost.window': '时间范围', 'cost.total': '合计', 'cost.pricing': '计价',
  'cost.scope.user': '用户', 'cost.scope.project': '项目', 'cost.period.day': '每天', 'cost.period.week': '每周',
  'cost.period.month': '每月', 'cost.action.refuse': '用完后拒绝新作业', 'cost.action.hold': '用完后挂起新作业',
  'cost.action.stop': '用完后停止作业',
};

export const DICTS = { en, 'zh-CN': zh };

function pick() {
  let stored = null;
  try { stored = localStorage.getItem(KEY); } catch (e) { /* storage off */ }
  if (stored && DICTS[stored]) return stored;
  for (const l of navigator.languages || [navigator.language || 'en']) {
    if (/^zh\b/i.test(l)) return 'zh-CN';
    if (/^en\b/i.test(l)) return 'en';
  }
  return 'en';
}

let current = pick();

export const lang = () => current;

export function setLang(l) {
  if (!DICTS[l]) return;
  current = l;
  try { localStorage.setItem(KEY, l); } catch (e) { /* storage off */ }
  document.documentElement.lang = l;
}

// t('queue.total', {n: 3}); an unknown key shows `fallback` (an API value) or the key.
export function t(key, vars, fallback) {
  const one = vars && vars.n === 1 ? DICTS[current][key + '.one'] : undefined;
  let s = one ?? DICTS[current][key] ?? en[key] ?? fallback ?? key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
  return s;
}
