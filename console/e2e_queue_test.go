package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/queue"
)

// An operator in Chromium follows the overview's stuck card to the stuck
// job, its age in words, and retries a dead job: the queue page with its
// counts, stuck job and dead letters; the job's attempts with their
// tokens and errors; the retry through its confirmation; a worker then
// completes the job.
func TestEndToEndQueueInChromium(t *testing.T) {
	t.Parallel()
	f := newQueueFixture(t)
	ctx := t.Context()
	w := f.worker(t, queue.Config{RetryBackoff: func(int) time.Duration { return 10 * time.Millisecond }})
	var done []int64
	for i := range 3 {
		done = append(done, f.enqueue(t, mailArgs{To: fmt.Sprintf("a%d@example.com", i)}, &queue.EnqueueOpts{Queue: "mail"}))
	}
	dead := f.enqueue(t, flakyArgs{To: "ops@example.com"}, &queue.EnqueueOpts{Queue: "mail", MaxAttempts: 3})
	require.Eventually(t, func() bool {
		return f.state(t, done[0]) == queue.StateCompleted && f.state(t, done[1]) == queue.StateCompleted &&
			f.state(t, done[2]) == queue.StateCompleted && f.state(t, dead) == queue.StateDiscarded
	}, 20*time.Second, 10*time.Millisecond, "the mail queue's jobs worked")
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx), "no worker, no reaper: what the page shows stays put")
	f.enqueue(t, mailArgs{To: "r1@example.com"}, &queue.EnqueueOpts{Queue: "reports"})
	f.enqueue(t, mailArgs{To: "r2@example.com"}, &queue.EnqueueOpts{Queue: "reports", Delay: time.Hour})
	stuck := f.enqueue(t, mailArgs{To: "r3@example.com"}, &queue.EnqueueOpts{Queue: "reports"})
	_, err := f.pool.Exec(ctx, `UPDATE aegis_job SET state = 'running', token = token + 1, attempt = 1, locked_by = 'web-2/4242/ab',
		run_at = now() - interval '3 minutes', attempted_at = now() - interval '2 minutes', locked_until = now() - interval '1 minute' WHERE id = $1`, stuck)
	require.NoError(t, err)
	require.NoError(t, f.admin.Pause(ctx, "reports"))

	ts := serve(t, &console.Config{DB: f.db})
	page := chromium.Open(t, 60*time.Second)
	bctx, exceptions, text, do := page.Ctx, page.Exceptions, page.Text, page.Do
	shoot := func(name string) {
		t.Helper()
		if *screenshots {
			page.Screenshot("../docs/" + name)
		}
	}

	do("follow the overview's stuck card", chromedp.Navigate(ts.URL+"/"), chromedp.Click(chromedp.CSS(`#card-queue-stuck`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-job="%d"][data-state="running"]`, stuck))))
	age, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`tr[data-job="%d"] .age`, stuck))))
	require.NoError(t, err)
	require.Regexp(t, `^stuck [1-9]\d*m\d\ds$`, age, "its lease ended a minute ago, or more after the wait for a browser")
	do("open the queue", chromedp.Navigate(ts.URL+"/"), chromedp.Click(chromedp.CSS(`nav a[href="/queue"]`)), chromedp.WaitVisible(chromedp.CSS(`#queues`)))
	completed, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-queue="mail"] td[data-state="completed"]`)))
	require.NoError(t, err)
	require.Equal(t, "3", completed)
	row, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`tr[data-job="%d"]`, stuck))))
	require.NoError(t, err)
	require.Contains(t, row, "web-2/4242/ab")
	row, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`tr[data-job="%d"]`, dead))))
	require.NoError(t, err)
	require.Contains(t, row, "smtp: 550 mailbox unavailable <b>for now</b>", "the error, as text")
	shoot("console-queue.png")

	do("open the dead job", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-job="%d"] a[href="/queue/jobs/%d"]`, dead, dead))),
		chromedp.WaitVisible(chromedp.CSS(`#attempts`)))
	j, err := f.admin.Job(ctx, dead)
	require.NoError(t, err)
	require.Len(t, j.Errors, 3)
	for _, e := range j.Errors {
		token, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`#attempts tr[data-attempt="%d"] .token`, e.Attempt))))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(e.Token), token, "attempt %d", e.Attempt)
	}
	shoot("console-queue-job.png")

	do("ask to retry", chromedp.Click(chromedp.CSS(fmt.Sprintf(`a.button[href="/queue/jobs/%d/retry"]`, dead))), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	require.Contains(t, text(), "with a fresh count of attempts and a greater token")
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#job[data-state="available"]`)))
	require.Contains(t, text(), "Retried: the job is available again")
	back, err := f.admin.Job(ctx, dead)
	require.NoError(t, err)
	require.Equal(t, queue.StateAvailable, back.State, "the page's retry is in the table")
	require.Greater(t, back.Token, j.Token)

	f.heal.Store(true)
	f.worker(t, queue.Config{})
	require.Eventually(t, func() bool { return f.state(t, dead) == queue.StateCompleted }, 20*time.Second, 10*time.Millisecond, "a worker completes the retried job")
	do("reload the job", chromedp.Navigate(fmt.Sprintf("%s/queue/jobs/%d", ts.URL, dead)), chromedp.WaitVisible(chromedp.CSS(`#job[data-state="completed"]`)))
	require.Empty(t, exceptions())
}
