// Package probe measures a job's GPU memory footprint: it runs the job alone on a GPU (the whole
// run or a window), samples the memory of the job's whole process tree at a high rate, and turns
// the peak into a cap. The process-tree attribution it uses is shared with the runner.
package probe
