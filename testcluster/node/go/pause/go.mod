module ddpctl.local/pause

go 1.26
