// Package campaign is the kill campaign: trials in which a job of ranks,
// each a separate process on this host, runs a random workload
// (point-to-point, exchanges, a master–worker loop whose master receives
// from AnySource, messages of 4 MiB and more, every collective) round
// after round, and one rank, chosen at random, is killed with SIGKILL at
// a random moment. Every survivor must end within a bound with
// ErrPeerLost naming the killed rank, and no result may come out wrong;
// a trial records for each survivor whether it hung, panicked, received a
// wrong result, its error, the time from the kill to it, and the rank the
// error names.
//
// Its tests run a short campaign (TestKillCampaign, a few trials per
// transport, as CI does); scripts/campaign.sh runs the long one and
// prints its table, whose figures docs/reliability.md keeps. The test
// binary is also the ranks' program: its TestMain runs RankMain when
// RoleEnv is set.
//
// Files:
//
//	workload.go  the steps, the plan of a seed, running and checking a step
//	rank.go      a rank of a trial: join, run the plan until it fails, report
//	trial.go     one trial: start the ranks, kill one, watch the others end
//	summary.go   the figures of a transport's trials, as a table
package campaign
